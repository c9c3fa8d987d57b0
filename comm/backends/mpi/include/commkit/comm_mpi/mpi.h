// The MPI backend (Open MPI; host buffers). Linking commkit::comm_mpi makes "mpi" available to
// ProcessGroup through the registry; this header is only needed to reference it explicitly.
#pragma once

namespace commkit {
class Registry;
}

extern "C" void commkit_register_mpi_backend(commkit::Registry* registry);
