// commkit's data types and reductions as MPI datatypes and ops (private to commkit::comm_mpi).
#pragma once

#include "commkit/comm/types.h"
#include "mpi_runtime.h"

namespace commkit::comm::mpi {

// The MPI datatype that moves `t` (f16 / bf16 move as 16-bit words).
MPI_Datatype MpiType(DataType t);

// The kind MPI actually reduces with: AVG and PREMUL_SUM are SUMs around host scaling steps.
ReduceKind BaseKind(ReduceKind k);

// The MPI_Op for `kind` on `t` (user-defined ops computing in f32 for f16 / bf16).
MPI_Op MpiOp(DataType t, ReduceKind kind);

}  // namespace commkit::comm::mpi
