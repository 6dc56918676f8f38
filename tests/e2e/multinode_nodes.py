"""Two real hosts (tools/two_hosts.sh), 2 ranks each, no parallel.ranks_per_node anywhere:
- `shardtrain doctor` reports 2 nodes with their hostnames and ranks, and what carries bytes
  between the hosts (Open MPI's TCP on the hosts' own network, a measured ping-pong); 3 ranks
  (2 + 1) are reported as uneven nodes;
- the communicator tests (mpi_tests) find one node per host, and every two-level collective's
  inter-node bytes are non-zero and equal the formula."""
import re

import harness as h
from two_hosts import TwoHosts

args = h.parse_args({"--mpi-tests": {"required": True}})

with TwoHosts(args.source) as hosts:
    proc = hosts.mpirun(4, [args.exe, "doctor"], timeout=120)
    out = proc.stdout
    h.check(proc.returncode == 0, f"doctor on 2 hosts x 2 ranks exits 0\n{out}\n{proc.stderr[-1500:]}")
    print(out)
    h.check("OK    nodes         2 node(s): host-a (ranks 0-1), host-b (ranks 2-3)" in out,
            "doctor: 2 nodes, named by their hostnames, with their ranks")
    h.check("4 rank(s) on 2 node(s)" in out, "doctor: the world size line counts 2 nodes")
    h.check(re.search(r"OK    transport     between hosts: Open MPI pml ob1, btl tcp,self,vader, tcp on veth-st; "
                      r"rank 0 \(host-a\) <-> rank 2 \(host-b\): 8 B one way in [0-9.]+ us, 1 MiB at [0-9.]+ GB/s", out),
            "doctor: the inter-node transport (TCP on the hosts' network) with a measured ping-pong")
    h.check("2 rank(s) on this host's" in out, "doctor: each host counts its own 2 ranks")

    proc = hosts.mpirun(3, [args.exe, "doctor"], timeout=120)
    h.check("WARN  nodes         2 node(s): host-a (ranks 0-1), host-b (rank 2); the nodes are uneven" in proc.stdout,
            f"doctor on 2 + 1 ranks: uneven nodes are a warning\n{proc.stdout}\n{proc.stderr[-800:]}")

    proc = hosts.mpirun(4, [args.mpi_tests, "--gtest_color=no"], timeout=180, forward=["ST_TEST_HOSTS=2"])
    out = proc.stdout + proc.stderr
    h.check(proc.returncode == 0, f"the communicator tests pass on 2 hosts x 2 ranks\n{out[-4000:]}")
    for test in ("NodesAreHosts", "InterNodeBytesOfEveryCollective", "BytesMovedMatchTheAlgorithms",
                 "HierarchyIsConsistent"):
        h.check(f"[       OK ] Fixture.{test}" in out, f"Fixture.{test} ran and passed on the two hosts")
    h.check("[  SKIPPED ] Fixture.NodesAreHosts" not in out, "NodesAreHosts was not skipped")
print("passed")
