// MPI implementation of Communicator (OpenMPI). The process must call
// MpiInit/MpiFinalize.
//
// Progress: MPI moves a large message only while some thread is inside MPI.
// By default a progress thread tests the pending non-blocking requests every
// kProgressPeriodUs while any is pending (and sleeps otherwise), so a ring's
// KV transfer advances - and its copy runs - off the compute thread
// (MPI_THREAD_MULTIPLE). FCP_MPI_PROGRESS=poll selects polling instead: no
// thread, Communicator::Progress() (called by ring attention between compute
// slices) tests the requests on the caller's thread; FCP_MPI_PROGRESS=none
// (a measurement control) does neither. If the library does not provide
// MPI_THREAD_MULTIPLE, polling is used.
// Thread-safety: one thread per communicator (the progress thread is
// internal).
#pragma once

#include <memory>
#include <string>

#include "exec/communicator.h"

namespace fcp::exec {

inline constexpr int kProgressPeriodUs = 50;

// MPI_Init_thread; returns the world communicator.
std::unique_ptr<Communicator> MpiInit(int* argc, char*** argv);
// "thread", "poll" or "none": how pending requests progress here.
std::string MpiProgressMode();
void MpiFinalize();
// MPI_Abort on the world: kills every rank with `code`. Callable from any
// thread.
[[noreturn]] void MpiAbort(int code);

}  // namespace fcp::exec
