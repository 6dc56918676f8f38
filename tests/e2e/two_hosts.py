"""Two real hosts for the multinode tests: tools/two_hosts.sh brings them up for the life of a
`with TwoHosts(...)` block (each test its own pair, so tests may run side by side) and tears
them down after. Where this machine does not permit the namespaces, the test skips (exit 77)
with tools/two_hosts.sh's reason."""
import os
import subprocess
import tempfile
import time

import harness as h


class TwoHosts:
    def __init__(self, source, slots=2):
        self.script = os.path.join(source, "tools", "two_hosts.sh")
        state = tempfile.mkdtemp(prefix="st_two_hosts_")
        # A test killed before its `down` leaves hosts that end by themselves within 20 minutes.
        self.env = dict(os.environ, TWO_HOSTS_DIR=state, TWO_HOSTS_SLOTS=str(slots), TWO_HOSTS_LIFETIME="1200")

    def _tool(self, *argv, timeout=60):
        return subprocess.run([self.script, *argv], capture_output=True, text=True, env=self.env, timeout=timeout)

    def __enter__(self):
        proc = self._tool("up")
        if proc.returncode == h.SKIP:
            print("SKIP:", proc.stderr.strip())
            raise SystemExit(h.SKIP)
        if proc.returncode != 0:
            h.fail(f"tools/two_hosts.sh up failed ({proc.returncode}): {proc.stderr.strip()}")
        print(proc.stdout.strip())
        return self

    def __exit__(self, *exc):
        proc = self._tool("down")
        if proc.returncode != 0:
            print(f"warning: tools/two_hosts.sh down failed: {proc.stderr.strip()}")
        return False

    def slurm_up(self):
        """A Slurm cluster of the two hosts (tools/two_hosts.sh slurm up); skips where Slurm's
        daemons or munge are missing."""
        import shutil
        for daemon in ("slurmctld", "slurmd"):
            if not shutil.which(daemon):
                print(f"SKIP: {daemon} is not installed (tools/setup.sh installs Slurm)")
                raise SystemExit(h.SKIP)
        proc = self._tool("slurm", "up", timeout=120)
        if proc.returncode != 0 and "munged is not running" in proc.stderr:
            print("SKIP:", proc.stderr.strip())
            raise SystemExit(h.SKIP)
        h.check(proc.returncode == 0, f"tools/two_hosts.sh slurm up: {proc.stdout.strip()} {proc.stderr.strip()}")

    def command(self, ranks, argv, forward=()):
        """The command line of an mpirun of `ranks` ranks over both hosts (consecutive ranks per
        host), forwarding the named environment variables to the remote ranks (-x)."""
        cmd = [self.script, "run", "-n", str(ranks), "--bind-to", "none"]
        for name in forward:
            cmd += ["-x", name]
        return cmd + list(argv)

    def mpirun(self, ranks, argv, timeout=300, forward=()):
        cmd = self.command(ranks, argv, forward)
        start = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)
        except subprocess.TimeoutExpired:
            h.fail(f"timed out after {timeout}s (a hang?): {' '.join(cmd)}")
        proc.seconds = time.time() - start
        return proc

    def popen(self, ranks, argv, forward=()):
        return subprocess.Popen(self.command(ranks, argv, forward), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)

    def kill(self, host):
        """kill -9 of every process on `host` ("a" or "b"): its ranks and its Open MPI daemon."""
        proc = self._tool("kill", host)
        h.check(proc.returncode == 0, f"tools/two_hosts.sh kill {host}: {proc.stdout.strip()} {proc.stderr.strip()}")

    def train(self, exe, ranks, deck, run_dir, label, extra=(), timeout=300):
        """As harness.train, on the two hosts."""
        params = run_dir + ".f32"
        proc = self.mpirun(ranks, [exe, "run", deck, "--save-params", params] + list(extra), timeout=timeout)
        return h.train_result(proc, run_dir, params, label)
