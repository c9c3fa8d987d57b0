// The "reproduce" command of a commkit-bench run: the launcher (detected from the environment the
// way rendezvous detects it, comm/launch_env.h), the environment variables that change results, and
// the exact argv, as one shell command line. It is printed in the table header and carried by every
// JSON-lines row and CSV row (field/column "reproduce"), so that every reported number says how to get
// it again (issue #7). Pure functions of argv and an environment map, so that they are unit-tested.
//
// Launchers (launch_env.h's precedence):
//   --local N                      no launcher:                      VAR=val commkit-bench ... --local N
//   commkit-run                    commkit-run -n L --               (multi-node: --nnodes M --node-rank
//                                                                     <0..M-1> --master-addr A --master-port P)
//   torchrun / Kubeflow / Azure ML torchrun --nnodes M --nproc-per-node L --no-python (multi-node: +
//                                  --node-rank <0..M-1> --master-addr A --master-port P)
//   Open MPI                       mpirun [--allow-run-as-root] -np N [--npernode L] --mca k v -x VAR=val
//   MPICH / Intel MPI (PMI)        mpiexec -n N [-ppn L]
//   Slurm                          srun [-N M] -n N
//   none (one process by hand)     the argv alone
// Variables: COMMKIT_*, NCCL_*, OMPI_MCA_*, GLOO_*, UCX_* except the ones a launcher sets for its
// children (COMMKIT_LAUNCHER, COMMKIT_STORE_HOSTED, Open MPI's orte/ess/pmix/... MCA variables) and
// secrets (any name containing TOKEN, SECRET, PASSWORD or CREDENTIAL, e.g. COMMKIT_STORE_TOKEN), sorted by
// name; plus MASTER_ADDR/MASTER_PORT under mpirun, mpiexec and srun (which do not set them). Under
// mpirun an OMPI_MCA_<name> variable is written `--mca <name> <value>` (mpirun reads those itself),
// every other one `-x VAR=value`; under the other launchers `VAR=value` before the command.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commkit/comm/launch_env.h"

namespace commkit::bench {

struct ReproduceInput {
  std::vector<std::string> argv;  // argv[0] as invoked, then the arguments
  EnvMap env;                     // the process environment (CurrentEnvironment())
  bool local = false;             // --local N: threads in one process, no launcher
  bool as_root = false;           // mpirun refuses root without --allow-run-as-root
};

// Words are quoted with commkit::ShellQuote (commkit/common/strings.h).

// The result-relevant variables of `env` (see above), sorted by name.
std::vector<std::pair<std::string, std::string>> TuningVariables(const EnvMap& env);

// The whole command line, e.g.
//   mpirun -np 2 -x COMMKIT_MPI_COLLECTIVES=nbc build/bin/commkit-bench allreduce --compare host,mpi
//   COMMKIT_HOST_ALGORITHM=ring commkit-run -n 4 -- commkit-bench allreduce -b 8 -e 1M
// When the launcher variables are malformed (rendezvous would fail too), the argv with the variables
// in front and no launcher.
std::string ReproduceCommand(const ReproduceInput& input);

}  // namespace commkit::bench
