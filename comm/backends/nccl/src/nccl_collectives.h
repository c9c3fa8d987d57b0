// Builders of NcclCall lists for each collective, including the ones NCCL has no primitive for
// (allgatherv, alltoallv, and gather/scatter before NCCL 2.28), built from grouped send/recv.
// Datatypes and reduction ops are ncclDataType_t / ncclRedOp_t values passed as int so this
// header stays free of nccl.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "commkit/common/status.h"
#include "nccl_engine.h"

namespace commkit::comm::nccl {

// The element size of an ncclDataType_t value; 0 for unknown.
std::size_t NcclTypeSize(int nccl_dtype);

NcclCall AllReduceCall(const void* send, void* recv, std::size_t count, int dtype, int op);
NcclCall BroadcastCall(const void* send, void* recv, std::size_t count, int dtype, int root);
NcclCall ReduceCall(const void* send, void* recv, std::size_t count, int dtype, int op, int root);
// recv holds nranks * send_count elements.
NcclCall AllGatherCall(const void* send, void* recv, std::size_t send_count, int dtype);
// send holds nranks * recv_count elements.
NcclCall ReduceScatterCall(const void* send, void* recv, std::size_t recv_count, int dtype, int op);
NcclCall SendCall(const void* buf, std::size_t count, int dtype, int peer);
NcclCall RecvCall(void* buf, std::size_t count, int dtype, int peer);

// Equal-size all-to-all: `count` elements to and from each rank.
std::vector<NcclCall> AllToAllCalls(const void* send, void* recv, std::size_t count, int dtype, int nranks);
// Gather to root: root's recv holds nranks * count elements.
std::vector<NcclCall> GatherCalls(const void* send, void* recv, std::size_t count, int dtype, int root,
                                  int rank, int nranks);
// Scatter from root: root's send holds nranks * count elements.
std::vector<NcclCall> ScatterCalls(const void* send, void* recv, std::size_t count, int dtype, int root,
                                   int rank, int nranks);

// v-variants through grouped send/recv. Counts and displacements are in elements, one per rank.
// Validates sizes (InvalidArgument naming the bad entry).
Result<std::vector<NcclCall>> AllGatherVCalls(const void* send, std::size_t send_count, void* recv,
                                              const std::vector<std::size_t>& recv_counts,
                                              const std::vector<std::size_t>& recv_displs, int dtype,
                                              int rank, int nranks);
Result<std::vector<NcclCall>> AllToAllVCalls(const void* send, const std::vector<std::size_t>& send_counts,
                                             const std::vector<std::size_t>& send_displs, void* recv,
                                             const std::vector<std::size_t>& recv_counts,
                                             const std::vector<std::size_t>& recv_displs, int dtype,
                                             int nranks);

// PREMUL_SUM: creates the op with a host-immediate scalar converted to `dtype` (f16/bf16 rounded to
// nearest even). The returned cleanup destroys it once the group has ended.
struct PreMulSumOp {
  int op = 0;  // ncclRedOp_t
  NcclCleanup cleanup;
};
Result<PreMulSumOp> CreatePreMulSum(ncclComm_t comm, double scalar, int dtype, std::string_view where);

// Host conversions used for the scalar (exposed for tests).
std::uint16_t FloatToHalfBits(float value);
std::uint16_t FloatToBfloat16Bits(float value);

}  // namespace commkit::comm::nccl
