// MPI implementation of Communicator (OpenMPI). The process must call
// MpiInit/MpiFinalize (MPI_THREAD_FUNNELED: only the main thread talks MPI).
// Thread-safety: one thread per communicator.
#pragma once

#include <memory>

#include "exec/communicator.h"

namespace fcp::exec {

// MPI_Init_thread(FUNNELED); returns the world communicator.
std::unique_ptr<Communicator> MpiInit(int* argc, char*** argv);
void MpiFinalize();
// MPI_Abort on the world: kills every rank with `code`.
[[noreturn]] void MpiAbort(int code);

}  // namespace fcp::exec
