"""examples/pytorch-mnist: ddp.py, score.py and swarm.py --no-mesh run as
docs/benchmarks.md runs them, on a smaller scale (swarm.py with nodes is
the Go e2e suite's, which has the binary)."""

import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pytorch-mnist")


def run(script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                          timeout=timeout)


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class ExamplesTest(unittest.TestCase):
    def test_ddp_then_score(self):
        with tempfile.TemporaryDirectory(prefix="meshtrain-ddp-test-") as tmp:
            snaps = os.path.join(tmp, "snaps")
            p = run("ddp.py", "--world", "2", "--slowdowns", "1,2", "--duration", "2", "--eval-every", "0",
                    "--eval-samples", "500", "--snapshot-dir", snaps, "--snapshot-every", "0.5")
            self.assertEqual(p.returncode, 0, p.stderr)
            final = lines(p.stdout)[-1]
            self.assertTrue(final["final"])
            self.assertTrue(final["averaged"])  # scored on the moving average, as a node reports
            self.assertEqual(final["rank"], 0)
            self.assertGreater(final["samples"], 0)
            self.assertIsNone(final["time_to_target"])  # no evaluations while it ran
            self.assertGreaterEqual(final["accuracy"], 0)
            self.assertLessEqual(final["accuracy"], 1)
            saved = glob.glob(os.path.join(snaps, "rank0-*.pt"))
            self.assertGreaterEqual(len(saved), 2)
            self.assertEqual(glob.glob(os.path.join(snaps, "rank1-*")), [])  # rank 0 saves for all

            # How far two seconds of training get depends on the machine, so
            # the target is one every snapshot meets: the first one times it.
            s = run("score.py", snaps, "--target", "0", "--eval-samples", "500")
            self.assertEqual(s.returncode, 0, s.stderr)
            summary = lines(s.stdout)[-1]
            self.assertTrue(summary["summary"])
            self.assertEqual(summary["snapshots"], len(saved))
            self.assertEqual(list(summary["time_to_target"]), ["0"])
            first = summary["time_to_target"]["0"]
            self.assertIsNotNone(first)
            self.assertLess(first, 2)  # the first snapshot, every 0.5 s of a 2 s run
            self.assertEqual(summary["all"], first)
            self.assertEqual(summary["first"], first)
            self.assertGreater(summary["last_accuracy"]["0"], 0)
            self.assertLessEqual(summary["last_accuracy"]["0"], 1)

    def test_score_without_snapshots(self):
        with tempfile.TemporaryDirectory() as tmp:
            s = run("score.py", tmp)
            self.assertEqual(s.returncode, 1)
            self.assertIn("no snapshots", s.stderr)

    def test_swarm_without_mesh(self):
        with tempfile.TemporaryDirectory(prefix="meshtrain-swarm-test-") as tmp:
            p = run("swarm.py", "--no-mesh", "--slowdowns", "1,2", "--duration", "2", "--eval-every", "0.5",
                    "--target", "0", "--workdir", tmp, "--", "--eval-samples", "500")
            self.assertEqual(p.returncode, 0, p.stderr)
            records = lines(p.stdout)
            summary = records[-1]
            self.assertTrue(summary["summary"])
            self.assertFalse(summary["mesh"])
            self.assertEqual(summary["failed"], [])
            self.assertEqual(summary["slowdowns"], [1.0, 2.0])
            evals = [r for r in records[:-1] if "accuracy" in r and not r.get("final")]
            finals = [r for r in records[:-1] if r.get("final")]
            self.assertEqual(sorted(r["rank"] for r in finals), [0, 1])
            # Every evaluation meets target 0: each rank's time is its first.
            want = {str(rank): min(r["t"] for r in evals if r["rank"] == rank) for rank in (0, 1)}
            self.assertEqual(summary["time_to_target"], want)
            self.assertEqual(summary["all"], max(want.values()))
            self.assertEqual(summary["first"], min(want.values()))

    def test_ddp_average_follows_the_node_rule(self):
        sys.path.insert(0, EXAMPLES)
        self.addCleanup(sys.path.remove, EXAMPLES)
        import ddp
        import torch

        net = torch.nn.Linear(1, 1, bias=False)
        with torch.no_grad():
            net.weight.fill_(1.0)
        avg = ddp.Average(net, 0.5)
        with torch.no_grad():
            net.weight.fill_(3.0)
        for _ in range(3):
            avg.step()
        self.assertEqual(avg.model.weight.item(), 1.0)  # updated only every 4th step
        avg.step()  # update 0: decay min(0.5**4, 1/10) = 0.0625
        self.assertAlmostEqual(avg.model.weight.item(), 0.0625 * 1 + 0.9375 * 3, places=6)
        self.assertEqual(net.weight.item(), 3.0)  # the trained model is untouched

    def test_bad_flags(self):
        for script, args, want in (("ddp.py", ("--world", "2", "--slowdowns", "1,2,4"), "--slowdowns needs 2 values"),
                                   ("ddp.py", ("--duration", "0"), "--duration must be > 0"),
                                   ("ddp.py", ("--ema", "1"), "--ema must be in [0, 1)"),
                                   ("swarm.py", ("--slowdowns", "0.5"), "slowdowns must be >= 1")):
            with self.subTest(script=script, args=args):
                p = run(script, *args)
                self.assertEqual(p.returncode, 2)
                self.assertIn(want, p.stderr)


if __name__ == "__main__":
    unittest.main()
