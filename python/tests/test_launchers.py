"""test_launchers.py: dist.init_process_group("tutti") under real launchers: torchrun
(`python -m torch.distributed.run --nproc_per_node 2`), MPICH's mpirun (examples/torch_ddp.py,
ranks from PMI_RANK / PMI_SIZE) and Open MPI's mpirun (OMPI_COMM_WORLD_*), plus the mapping of
launcher variables itself (setup_env_from_launcher); a C program (tutti-bench) under
torchrun, whose agent holds MASTER_PORT; and what a launcher's SIGTERM and a user's Ctrl-C do
to a process that imported tutti_torch.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")


def wait_listening(port, proc, timeout=60):
    """Returns once something listens on TCP port `port` (the store of rank 0, `proc`), read
    from /proc/net/tcp{,6} without connecting to it (a fixed 3 s sleep stood here)."""
    want = ":%04X" % port
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError("rank 0 ended (%d) before it served port %d: %s"
                                 % (proc.returncode, port, proc.communicate()[0]))
        for name in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[1].endswith(want) and fields[3] == "0A":  # 0A: LISTEN
                        return
        time.sleep(0.02)
    raise AssertionError("nothing listens on port %d after %d s" % (port, timeout))


def clean_env(**extra):
    """The test's environment without any rank variables (a launcher sets its own)."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env.update(extra)
    return env


def w_launched(expect_launcher):
    """One rank under a launcher: rank variables mapped, init through env://, one allreduce."""
    import torch
    import torch.distributed as dist

    import tutti_torch

    if expect_launcher == "mpich":
        assert "PMI_RANK" in os.environ, sorted(os.environ)
    elif expect_launcher == "openmpi":
        assert "OMPI_COMM_WORLD_RANK" in os.environ, sorted(os.environ)
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("tutti")
    assert (dist.get_rank(), dist.get_world_size()) == (rank, size)
    t = torch.tensor([rank + 1.0], dtype=torch.bfloat16)
    dist.all_reduce(t)
    assert t.item() == size * (size + 1) / 2, t
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert isinstance(backend, tutti_torch.BackendTutti), backend
    dist.barrier()
    dist.destroy_process_group()
    print("rank %d of %d under %s (%s) port %s: ok" % (rank, size, expect_launcher,
                                                       type(backend).__name__,
                                                       os.environ["MASTER_PORT"]))


def w_restart():
    """One rank of a torchrun job with --max-restarts 1: rank 1 of the first attempt exits once
    the groups are made; the restarted attempt (new processes, torchrun's agent store still
    holding the first one's keys) makes its groups again and finishes. Then, in the same
    process, a new default group and a group "1" of both ranks, where the last group "1" had
    rank 0 only (rank 1, not in it, had counted none)."""
    import datetime

    import torch
    import torch.distributed as dist

    import tutti_torch  # noqa: F401

    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    timeout = datetime.timedelta(seconds=40)
    dist.init_process_group("tutti", timeout=timeout)
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t[0].item() == size, t
    only0 = dist.new_group([0])
    if rank == 0:
        dist.all_reduce(t, group=only0)
    dist.barrier()
    if attempt == 0:
        if rank == 1:
            print("rank 1 of attempt 0 exits", flush=True)
            os._exit(1)
        time.sleep(60)  # torchrun's agent ends it and starts the next attempt
        os._exit(2)
    dist.destroy_process_group()
    dist.init_process_group("tutti", timeout=timeout)
    both = dist.new_group([0, 1])
    t = torch.ones(4)
    dist.all_reduce(t, group=both)
    assert t[0].item() == 2, t
    dist.destroy_process_group()
    print("rank %d of attempt %d: ok" % (rank, attempt), flush=True)


class TestLaunchers(unittest.TestCase):
    script = os.path.abspath(__file__)

    def launch(self, cmd, env, timeout=120):
        res, timed_out = harness.run_cmd(cmd, timeout=timeout, env=env)
        self.assertFalse(timed_out, "hung: " + harness.report([res], True))
        self.assertEqual(res.rc, 0, harness.report([res]))
        return res

    def test_torchrun(self):
        port = harness.free_port()
        cmd = [harness.PY, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               self.script, "--worker", "launched", "torchrun"]
        res = self.launch(cmd, clean_env())
        self.assertEqual(res.out.count("under torchrun"), 2, harness.report([res]))

    def test_torchrun_restart(self):
        """torchrun --max-restarts 1 with a worker that exits: the restarted workers meet again.
        Its agent's store outlives the attempt, and the new processes read the first attempt's
        keys (2 restarts in 8 came up, in a helper's probe; some waited out the group's
        timeout): their keys are the attempt's own now (TORCHELASTIC_RESTART_COUNT)."""
        port = harness.free_port()
        cmd = [harness.PY, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--max-restarts", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
               self.script, "--worker", "restart"]
        res = self.launch(cmd, clean_env(), timeout=240)
        self.assertIn("rank 1 of attempt 0 exits", res.out, harness.report([res]))
        for r in (0, 1):
            self.assertIn("rank %d of attempt 1: ok" % r, res.out, harness.report([res]))

    def test_torchrun_c_program(self):
        """A C program under torchrun (--no-python): torchrun's agent serves torch's store at
        MASTER_PORT, so tutti's own store must go elsewhere (the next odd port), on every node."""
        bench = self.bench()
        even = harness.free_port()
        even += even % 2  # torchrun picks odd ports itself; a user's --master_port may be even
        for n, port in ((3, None), (2, even)):
            cmd = [harness.PY, "-m", "torch.distributed.run", "--nproc_per_node", str(n)]
            cmd += ["--master_port", str(port)] if port else []
            cmd += ["--no-python", bench, "alltoall", "-e", "4K", "-f", "8", "-i", "3", "-c"]
            res = self.launch(cmd, clean_env())
            self.assertIn("4096", res.out, harness.report([res]))

    @unittest.skipUnless(shutil.which("mpirun.mpich"), "no mpirun.mpich")
    def test_mpirun_mpich_example(self):
        port = harness.free_port()
        example = os.path.join(harness.ROOT, "examples", "torch_ddp.py")
        cmd = ["mpirun.mpich", "-n", "2", harness.PY, example, "--steps", "20",
               "--dtype", "bf16"]
        res = self.launch(cmd, clean_env(MASTER_PORT=str(port)))
        self.assertIn("replicas identical: yes", res.out, harness.report([res]))
        cmd = ["mpirun.mpich", "-n", "2", harness.PY, self.script, "--worker", "launched",
               "mpich"]
        res = self.launch(cmd, clean_env(MASTER_PORT=str(harness.free_port())))
        self.assertEqual(res.out.count("under mpich"), 2, harness.report([res]))

    @unittest.skipUnless(shutil.which("mpirun.openmpi"), "no mpirun.openmpi")
    def test_mpirun_openmpi(self):
        port = harness.free_port()
        env = clean_env(MASTER_PORT=str(port))
        if not shutil.which("ssh") and not shutil.which("rsh"):
            env["OMPI_MCA_plm"] = "isolated"  # no ssh/rsh: Open MPI's local launcher
        cmd = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-n", "2",
               "-x", "MASTER_PORT", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
               harness.PY, self.script, "--worker", "launched", "openmpi"]
        res = self.launch(cmd, env)
        self.assertEqual(res.out.count("under openmpi"), 2, harness.report([res]))

    def bench(self):
        build = os.path.dirname(os.path.abspath(os.environ["PYTHONPATH"].split(os.pathsep)[0]))
        bench = os.path.join(build, "bench", "tutti-bench")
        if not os.access(bench, os.X_OK):
            self.skipTest("no %s" % bench)
        return bench

    @unittest.skipUnless(shutil.which("mpirun.mpich"), "no mpirun.mpich")
    def test_mpich_wrappers(self):
        """A C program started by MPICH's mpirun through a wrapper (a shell script, timeout,
        bash -c that forks): Hydra gives each rank a session and here a parent of its own, and
        without a launcher's job id the ranks took each other for another job (rank 1 refused
        at once, rank 0 waiting out its timeout); the mpiexec address its proxies carry names
        the job."""
        bench = self.bench()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        script = os.path.join(tmp.name, "run.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n%s allgather -b 8 -e 4K -i 5 -c\n" % bench)
        os.chmod(script, 0o755)
        env = clean_env(TUTTI_TIMEOUT="30")
        env.pop("MASTER_PORT", None)
        for wrap in ([script], ["timeout", "100", bench, "allgather", "-b", "8", "-e", "4K",
                                "-i", "5", "-c"],
                     ["bash", "-c", "%s allgather -b 8 -e 4K -i 5 -c; true" % bench]):
            res = self.launch(["mpirun.mpich", "-n", "3"] + wrap, env, timeout=90)
            self.assertIn("4096", res.out, harness.report([res]))
        # tutti_torch and libtutti pick the same port for one mpiexec (torch's store and a C
        # program's would otherwise differ)
        import re
        py = "%s -c 'import os, tutti_torch; print(\"PY\", os.environ[\"MASTER_PORT\"])'" % \
            harness.PY
        both = "%s && CCL_LOG_LEVEL=info %s allgather -b 8 -e 8 -i 2 2>&1" % (py, bench)
        res = self.launch(["mpirun.mpich", "-n", "2", "bash", "-c", both], env, timeout=90)
        pys = re.findall(r"^PY (\d+)$", res.out, re.M)
        cs = re.findall(r"the store takes port (\d+), the job's own", res.out)
        self.assertTrue(len(pys) == 2 and len(cs) == 2 and len(set(pys + cs)) == 1,
                        "ports: python %s, libtutti %s\n%s" % (pys, cs, res.out))

    @unittest.skipUnless(shutil.which("mpirun.mpich") and shutil.which("mpirun.openmpi"),
                         "no mpirun.mpich or mpirun.openmpi")
    def test_two_jobs_default_port(self):
        """Jobs started at once on one node by mpirun with no MASTER_PORT each meet on a port of
        their own (from Hydra's mpiexec address, from Open MPI's job id), the same for torch's
        store (setup_env_from_launcher) as for libtutti's: on the shared default 29500 the
        second job's rank 0 failed (address in use) and its other ranks with it."""
        env = clean_env(CCL_LOG_LEVEL="info")
        env.pop("MASTER_PORT", None)
        if not shutil.which("ssh") and not shutil.which("rsh"):
            env["OMPI_MCA_plm"] = "isolated"
        # Each Open MPI job gets a session directory of its own: two mpiruns started at once
        # race to create the shared /tmp/ompi.<host>.<uid> ("File exists", orte_init fails).
        tmp = tempfile.mkdtemp(prefix="tutti-ompi-")
        self.addCleanup(shutil.rmtree, tmp, True)

        def ompi(k):
            base = os.path.join(tmp, str(k))
            os.mkdir(base)
            return ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-n", "2",
                    "--mca", "orte_tmpdir_base", base,
                    "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "CCL_LOG_LEVEL"]
        py = [harness.PY, self.script, "--worker", "launched"]
        c = [self.bench(), "allgather", "-b", "8", "-e", "64K", "-i", "50"]
        cmds = [["mpirun.mpich", "-n", "2"] + py + ["mpich"],
                ["mpirun.mpich", "-n", "2"] + py + ["mpich"],
                ompi(0) + py + ["openmpi"],
                ["mpirun.mpich", "-n", "2"] + c,
                ["mpirun.mpich", "-n", "2"] + c,
                ompi(1) + c]
        for attempt in range(3):
            procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True) for cmd in cmds]
            outs = []
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=180)[0])
                except subprocess.TimeoutExpired:
                    for q in procs:
                        os.killpg(q.pid, signal.SIGKILL)
                    self.fail("hung: %s" % p.args)
            # Two jobs' ports meet by chance once in 2000 pairs (the second fails at once, as
            # it should): run them again rather than fail.
            if attempt < 2 and any(p.returncode != 0 and "ddress already in use" in out
                                   for p, out in zip(procs, outs)):
                continue
            break
        for p, out in zip(procs, outs):
            self.assertEqual(p.returncode, 0, "%s:\n%s" % (p.args, out))
        import re
        ports = []
        for cmd, out in zip(cmds, outs):
            if cmd[-1] in ("mpich", "openmpi"):
                got = re.findall(r"under \w+ \(BackendTutti\) port (\d+): ok", out)
            else:
                got = re.findall(r"the store takes port (\d+), the job's own", out)
            self.assertEqual(len(got), 2, "%s:\n%s" % (cmd, out))
            self.assertEqual(got[0], got[1], "ranks of one job disagree: %s" % out)
            self.assertTrue(30000 <= int(got[0]) < 32000, got)
            ports.append(int(got[0]))
        # the two Hydra jobs of each kind have mpiexecs of their own (and all ran at once, so
        # none shared a port with another)
        self.assertNotEqual(ports[0], ports[1], ports)
        self.assertNotEqual(ports[3], ports[4], ports)

    def test_signals(self):
        """Importing tutti_torch leaves Python's signal handling as it was: Ctrl-C raises
        KeyboardInterrupt and SIGTERM kills the process (as torchrun's agent expects when it
        stops a rank), with nothing written to the working directory. Debian's libfabric loads
        libinfinipath, whose handlers called exit(1) there and left a *.btr file."""
        script = ("import sys, time\n"
                  "import tutti_torch\n"
                  "try:\n"
                  "    print('ready', flush=True)\n"
                  "    time.sleep(60)\n"
                  "except KeyboardInterrupt:\n"
                  "    print('KeyboardInterrupt', flush=True)\n"
                  "    sys.exit(7)\n")
        env = clean_env()
        env.pop("IPATH_NO_BACKTRACE", None)
        env.pop("HFI_NO_BACKTRACE", None)
        # the process runs in a directory of its own: a relative PYTHONPATH would not find it
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(d) for d in
                                            env.get("PYTHONPATH", "").split(os.pathsep) if d)
        with tempfile.TemporaryDirectory() as cwd:
            for sig, want_rc, want_out in ((signal.SIGINT, 7, "KeyboardInterrupt"),
                                           (signal.SIGTERM, -signal.SIGTERM, "")):
                p = subprocess.Popen([harness.PY, "-c", script], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    first = p.stdout.readline().strip()
                    if first != "ready":
                        p.kill()
                        self.fail("the script did not start: %r %r" % (first, p.stderr.read()))
                    time.sleep(0.2)
                    p.send_signal(sig)
                    out, err = p.communicate(timeout=60)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                self.assertEqual(p.returncode, want_rc,
                                 "%s: exit %s (want %s); stdout %r stderr %r"
                                 % (sig.name, p.returncode, want_rc, out, err[-2000:]))
                self.assertIn(want_out, out)
                self.assertEqual(os.listdir(cwd), [], "%s left files behind" % sig.name)

    def test_setup_env_from_launcher(self):
        import tutti_torch

        env = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (3, 4, 1))
        self.assertEqual((env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]), ("3", "4", "1"))
        self.assertEqual(env["MASTER_ADDR"], "127.0.0.1")
        env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
               "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_PORT": "1234"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 2, 0))
        self.assertEqual(env["MASTER_PORT"], "1234")  # kept
        # torchrun's own variables win over an outer launcher's
        env = {"RANK": "0", "WORLD_SIZE": "2", "PMI_RANK": "5", "PMI_SIZE": "8",
               "MPI_LOCALRANKID": "5"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (0, 2, None))
        self.assertNotIn("LOCAL_RANK", env)  # the outer launcher's local rank is not this one's
        # RANK and WORLD_SIZE by hand: the local rank is not known, and not made 0 on every rank
        env = {"RANK": "1", "WORLD_SIZE": "2"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 2, None))
        self.assertNotIn("LOCAL_RANK", env)
        env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 2, 1))
        # MPICH without MPI_LOCALRANKID: the local rank of the Open MPI variables that agree
        env = {"PMI_RANK": "1", "PMI_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
               "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 2, 1))
        self.assertEqual(env["LOCAL_RANK"], "1")
        self.assertEqual(tutti_torch.setup_env_from_launcher({}), (0, 1, 0))
        with self.assertRaises(ValueError):
            tutti_torch.setup_env_from_launcher({"PMI_RANK": "4", "PMI_SIZE": "4"})
        with self.assertRaises(ValueError):
            tutti_torch.setup_env_from_launcher({"RANK": "x"})
        # RANK without WORLD_SIZE (torch refuses it) is not made a job of one rank
        env = {"RANK": "0", "MASTER_ADDR": "127.0.0.1"}
        with self.assertRaisesRegex(ValueError, "WORLD_SIZE is not"):
            tutti_torch.setup_env_from_launcher(env)
        self.assertNotIn("WORLD_SIZE", env)
        # a nested mpirun's leaked variables: MPICH's and Open MPI's disagree
        env = {"PMI_RANK": "0", "PMI_SIZE": "1", "OMPI_COMM_WORLD_RANK": "1",
               "OMPI_COMM_WORLD_SIZE": "2"}
        with self.assertRaisesRegex(ValueError, "disagree"):
            tutti_torch.setup_env_from_launcher(env)
        self.assertNotIn("RANK", env)
        # ... and agree: fine
        env = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0",
               "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 2, 0))

    def test_setup_env_from_slurm(self):
        """srun's tasks: rank, size and local rank from Slurm, and a store port of the job's own
        (libtutti's choice, so a C program and torch in one step meet alike); a batch script or
        salloc shell, whose SLURM_PROCID=0 / SLURM_NTASKS are not a step's, is not launched."""
        import tutti_torch

        step = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "3", "SLURM_NTASKS": "3",
                "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4321", "SLURM_STEP_ID": "2",
                "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "vm"}
        env = dict(step)
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 3, 1))
        # task 1 without a step's task count is no batch shell: refused, not a job of one
        with self.assertRaisesRegex(ValueError, "SLURM_PROCID=1 .*srun"):
            tutti_torch.setup_env_from_launcher({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"})
        self.assertEqual((env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]), ("1", "3", "1"))
        self.assertEqual((env["MASTER_ADDR"], env["MASTER_PORT"]), ("127.0.0.1", str(20000 + 3212)))
        # across nodes: the step's first node, unless MASTER_ADDR is set
        env = dict(step, SLURM_STEP_NUM_NODES="2", SLURM_STEP_NODELIST="cn[07-08,11],gpu1")
        tutti_torch.setup_env_from_launcher(env)
        self.assertEqual(env["MASTER_ADDR"], "cn07")
        env = dict(step, SLURM_STEP_NUM_NODES="2", SLURM_STEP_NODELIST="cn[07-",
                   MASTER_ADDR="head", MASTER_PORT="777")
        tutti_torch.setup_env_from_launcher(env)
        self.assertEqual((env["MASTER_ADDR"], env["MASTER_PORT"]), ("head", "777"))
        with self.assertRaisesRegex(ValueError, "MASTER_ADDR"):
            tutti_torch.setup_env_from_launcher(dict(step, SLURM_STEP_NUM_NODES="2",
                                                     SLURM_STEP_NODELIST="cn[07-"))
        for hosts, first in (("vm", "vm"), ("rack[1-2]-n[3-4],x", "rack1-n3"), ("n[12,07]", "n12"),
                             ("n[]", None), ("n[1-2", None), ("n]1[", None), ("", None),
                             (",x", None), ("a b", None), ("n[[1]]", None), ("n[-1]", None),
                             ("n[,2]x", None), ("a\tb", None), ("[1-2]", None),
                             ("n[3-1]", None), ("n[1-a]", None), ("n[1-]", None),
                             ("n[09-10]", "n09"), ("n[1,3-4]", "n1"), ("n[1--2]", None),
                             ("n[3--1]", None), ("n[1-99999999999999999999]", None),
                             ("n[\u0661-2]", None)):
            self.assertEqual(tutti_torch._hostlist_first(hosts), first, hosts)
        # torchrun or mpirun inside an srun step: theirs win, and Slurm's may differ
        env = dict(step, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_PORT="29400")
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (0, 2, 0))
        self.assertEqual(env["MASTER_PORT"], "29400")
        env = dict(step, PMI_RANK="3", PMI_SIZE="4")
        self.assertEqual(tutti_torch.setup_env_from_launcher(env)[:2], (3, 4))
        self.assertEqual(env["MASTER_PORT"], "29500")
        # srun --mpi=pmi2 sets PMI_* itself (PMI_JOBID "<job>.<step>", the step's numbers): a
        # Slurm step, its port and first node, as libtutti reads it
        env = dict(step, PMI_RANK="1", PMI_SIZE="3", PMI_JOBID="4321.2",
                   SLURM_STEP_NUM_NODES="2", SLURM_STEP_NODELIST="cn[07-08]")
        self.assertEqual(tutti_torch.setup_env_from_launcher(env), (1, 3, 1))
        self.assertEqual((env["MASTER_ADDR"], env["MASTER_PORT"]), ("cn07", str(20000 + 3212)))
        # a batch script run without srun, and an salloc shell: one process, with a warning
        for env in ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9"},
                    {"SLURM_NTASKS": "2"}):
            self.assertFalse(tutti_torch._launched(env))
            with self.assertWarnsRegex(RuntimeWarning, "srun"):
                self.assertEqual(tutti_torch.setup_env_from_launcher(env), (0, 1, 0))
        self.assertTrue(tutti_torch._launched(step))

    def test_setup_env_leftover_rank(self):
        """RANK/WORLD_SIZE left in the shell around an mpirun win, with a warning naming the
        launcher's own numbers (every rank became rank 0, one failed on the port and the other
        waited torch's 30 min); torchrun inside an mpirun is not warned."""
        import warnings

        import tutti_torch

        env = {"RANK": "0", "WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}
        with self.assertWarnsRegex(RuntimeWarning, "PMI_RANK/PMI_SIZE say rank 1 of 2"):
            self.assertEqual(tutti_torch.setup_env_from_launcher(env)[:2], (0, 2))
        env = {"RANK": "0", "WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0",
               "OMPI_COMM_WORLD_SIZE": "2"}
        with self.assertWarnsRegex(RuntimeWarning, "unset them"):
            tutti_torch.setup_env_from_launcher(env)
        for env in ({"RANK": "3", "WORLD_SIZE": "4", "PMI_RANK": "1", "PMI_SIZE": "2",
                     "TORCHELASTIC_RUN_ID": "none", "GROUP_RANK": "1"},
                    {"RANK": "1", "WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                tutti_torch.setup_env_from_launcher(env)

    def test_setup_env_hosts_without_master_addr(self):
        """mpirun across hosts with MASTER_ADDR unset: refused at once, as plain torch does
        (127.0.0.1 was taken, and every rank waited out its timeout for a store no other host
        reaches); on one host, or with MASTER_ADDR set, 127.0.0.1 or that address."""
        import tutti_torch

        for env in ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2"},
                    {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
                     "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}):
            with self.assertRaisesRegex(ValueError, "MASTER_ADDR is not set, and this job spans "
                                                    "several hosts"):
                tutti_torch.setup_env_from_launcher(dict(env))
            on_one = dict(env, MPI_LOCALNRANKS="4", OMPI_COMM_WORLD_LOCAL_SIZE="4")
            tutti_torch.setup_env_from_launcher(on_one)
            self.assertEqual(on_one["MASTER_ADDR"], "127.0.0.1")
            given = dict(env, MASTER_ADDR="10.0.0.1")
            tutti_torch.setup_env_from_launcher(given)
            self.assertEqual(given["MASTER_ADDR"], "10.0.0.1")
        # RANK/WORLD_SIZE of one's own (mp.spawn under a one-rank mpirun): not that launcher's
        spawned = {"RANK": "3", "WORLD_SIZE": "8", "PMI_RANK": "0", "PMI_SIZE": "1",
                   "MPI_LOCALNRANKS": "1"}
        tutti_torch.setup_env_from_launcher(spawned)
        self.assertEqual(spawned["MASTER_ADDR"], "127.0.0.1")

    def test_gloo_socket_ifname(self):
        """GLOO_SOCKET_IFNAME, which a job set up for Gloo names its interface with, is used
        unless TUTTI_SOCKET_IFNAME is set (it was ignored); an interface that is not there is
        then refused at init, naming it."""
        import tutti_torch

        env = {"GLOO_SOCKET_IFNAME": "ib0,ib1"}
        tutti_torch._interface_from_gloo(env)
        self.assertEqual(env["TUTTI_SOCKET_IFNAME"], "=ib0,ib1")
        env = {"GLOO_SOCKET_IFNAME": "ib0", "TUTTI_SOCKET_IFNAME": "eth"}
        tutti_torch._interface_from_gloo(env)
        self.assertEqual(env["TUTTI_SOCKET_IFNAME"], "eth")
        env = clean_env(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(harness.free_port()), GLOO_SOCKET_IFNAME="nonesuch0")
        env.pop("TUTTI_SOCKET_IFNAME", None)
        out = subprocess.run([harness.PY, self.script, "--worker", "step"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60).stdout
        self.assertIn("from GLOO_SOCKET_IFNAME=nonesuch0", out)

    def test_import_in_batch_shell(self):
        """Python run in an sbatch script or salloc shell of 2 tasks without srun: importing
        tutti_torch warns that it needs srun and makes it a job of one, as libtutti does (it said
        nothing, and torch failed on RANK unset)."""
        env = clean_env(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_JOB_ID="9")
        for k in ("MASTER_PORT", "MASTER_ADDR", "SLURM_STEP_NUM_TASKS"):
            env.pop(k, None)
        out = subprocess.run([harness.PY, "-c", "import os, tutti_torch; print(os.environ['RANK'],"
                              " os.environ['WORLD_SIZE'])"], env=env, capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["0", "1"])
        self.assertIn("start the ranks with srun", out.stderr)

    def test_steps_ports_meet(self):
        """Steps 0 and 10 of one Slurm job derive one port (20000 + 10 x job + step mod 10). A
        task of step 10 that reaches step 0's torch store (its own rank 0 lost the port) is
        refused, naming both steps; before, it joined step 0's group silently, and step 0's own
        rank 1 later waited out its timeout."""
        import random
        import socket

        for _ in range(50):  # a port in Slurm's derived range that nothing holds now
            port = random.randrange(20000, 30000)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                    break
                except OSError:
                    continue
        job, step = (port - 20000) // 10, (port - 20000) % 10

        def task(rank, step_id):
            env = clean_env(SLURM_JOB_ID=str(job), SLURM_STEP_ID=str(step_id),
                            SLURM_PROCID=str(rank), SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2",
                            SLURM_LOCALID=str(rank), SLURM_STEP_NUM_NODES="1",
                            SLURM_STEP_NODELIST="localhost")
            for k in ("MASTER_PORT", "MASTER_ADDR", "TORCHELASTIC_USE_AGENT_STORE"):
                env.pop(k, None)
            return subprocess.Popen([harness.PY, self.script, "--worker", "step"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
        first = task(0, step)
        wait_listening(port, first)  # step 0's rank 0 serves the port
        late = task(1, step + 10)
        try:
            out = late.communicate(timeout=60)[0]
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
        self.assertEqual(late.returncode, 3, out)
        self.assertIn("belongs to another job", out)
        self.assertIn("Slurm job %d step %d" % (job, step), out)
        self.assertIn("Slurm job %d step %d" % (job, step + 10), out)

    def test_jobs_share_master_port(self):
        """Two Open MPI jobs given one MASTER_PORT: a rank of the second that reaches the first
        one's torch store (its own rank 0 lost the port) is refused, naming both jobs and the
        port; before, it joined the first job's group and reduced with it silently. A rank of
        the first job joins as before; so does a rank of another launch that init_process_group
        is given a rank and size of the group (a group built on purpose from two launches)."""
        port = str(harness.free_port())

        def rank_of(job, rank, size=2, master_port=port, **extra):
            env = clean_env(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(size),
                            OMPI_COMM_WORLD_LOCAL_RANK=str(rank), OMPI_MCA_ess_base_jobid=job,
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=master_port, **extra)
            env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
            return subprocess.Popen([harness.PY, self.script, "--worker", "step"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
        first = rank_of("1111", 0)
        wait_listening(int(port), first)  # its rank 0 serves the port
        other = rank_of("2222", 1)
        out = other.communicate(timeout=60)[0]
        own = rank_of("1111", 1)
        own_out = own.communicate(timeout=60)[0]
        first_out = first.communicate(timeout=60)[0]
        self.assertEqual(other.returncode, 3, out)
        self.assertIn("belongs to another job", out)
        self.assertIn("Open MPI job 1111", out)
        self.assertIn("Open MPI job 2222", out)
        self.assertIn("both jobs were given MASTER_PORT=%s" % port, out)
        self.assertEqual((own.returncode, first.returncode), (0, 0), own_out + first_out)
        self.assertIn("rank 1 joined", own_out)
        first = rank_of("1111", 0)
        wait_listening(int(port), first)
        joined = rank_of("3333", 0, TEST_GROUP="1/2")  # its launch: rank 0 of 2
        joined_out = joined.communicate(timeout=60)[0]
        first_out = first.communicate(timeout=60)[0]
        self.assertEqual((joined.returncode, first.returncode), (0, 0), joined_out + first_out)
        self.assertIn("rank 1 joined", joined_out)
        # The store given by init_method, MASTER_PORT elsewhere: the message names the store.
        first = rank_of("1111", 0)
        wait_listening(int(port), first)
        other = rank_of("2222", 1, master_port=str(int(port) ^ 1), TEST_GROUP="1/2",
                        TEST_INIT="tcp://127.0.0.1:%s" % port)
        out = other.communicate(timeout=60)[0]
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
        self.assertEqual(other.returncode, 3, out)
        self.assertIn("the store at 127.0.0.1:%s belongs to another job" % port, out)
        self.assertIn("both jobs were given the store 127.0.0.1:%s" % port, out)

    def test_setup_env_job_port(self):
        """Under mpirun with MASTER_PORT unset: Open MPI's job id gives a port of the job's own
        (libtutti's hash); Hydra's ranks get one only from the Hydra proxy they descend from
        (this test's process has none), whatever MPI_LOCALNRANKS says; a set MASTER_PORT wins."""
        import tutti_torch

        ompi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_MCA_ess_base_jobid": "2110783489"}
        env = dict(ompi)
        tutti_torch.setup_env_from_launcher(env)
        first = int(env["MASTER_PORT"])
        self.assertEqual(first, 31122)  # libtutti's too (check_bootstrap test_launcher_port)
        env = dict(ompi, OMPI_MCA_ess_base_jobid="2110783490")
        tutti_torch.setup_env_from_launcher(env)
        self.assertNotEqual(int(env["MASTER_PORT"]), first)
        env = dict(ompi, OMPI_MCA_ess_base_jobid="", PMIX_NAMESPACE="prterun-vm-77@1")
        tutti_torch.setup_env_from_launcher(env)
        self.assertTrue(30000 <= int(env["MASTER_PORT"]) < 32000, env["MASTER_PORT"])
        env = dict(ompi, MASTER_PORT="29600")
        tutti_torch.setup_env_from_launcher(env)
        self.assertEqual(env["MASTER_PORT"], "29600")
        env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}  # no job id
        tutti_torch.setup_env_from_launcher(env)
        self.assertEqual(env["MASTER_PORT"], "29500")
        for local in ("2", "1", None):  # not under a Hydra proxy here
            env = {"PMI_RANK": "0", "PMI_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
            if local:
                env["MPI_LOCALNRANKS"] = local
            tutti_torch.setup_env_from_launcher(env)
            self.assertEqual(env["MASTER_PORT"], "29500")


def w_step():
    """One rank of a job (a launcher's variables set by the test): init, or the error."""
    import datetime

    import torch.distributed as dist

    import tutti_torch  # noqa: F401  (maps SLURM_* and derives MASTER_PORT)

    # TEST_GROUP="r/n": the rank and size given to init_process_group, not the launcher's (a
    # group built on purpose from several launches)
    # TEST_INIT: init_method
    given = {}
    if os.environ.get("TEST_GROUP"):
        r, n = os.environ["TEST_GROUP"].split("/")
        given = {"rank": int(r), "world_size": int(n)}
    if os.environ.get("TEST_INIT"):
        given["init_method"] = os.environ["TEST_INIT"]
    try:
        dist.init_process_group("tutti", timeout=datetime.timedelta(seconds=20), **given)
    except Exception as e:  # noqa: BLE001  (the test reads the text)
        print("init failed: %s" % e)
        sys.exit(3)
    print("rank %d joined" % dist.get_rank())
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        i = sys.argv.index("--worker")
        if sys.argv[i + 1] == "step":
            w_step()
        if sys.argv[i + 1] == "restart":
            w_restart()
            sys.exit(0)
        w_launched(sys.argv[i + 2])
        sys.exit(0)
    unittest.main()
