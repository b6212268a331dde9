"""examples/pytorch-mnist/ddp_pace.py: the DDP pace measurement runs and paces."""

import json
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pytorch-mnist", "ddp_pace.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


class DDPPaceTest(unittest.TestCase):
    def test_paced_by_the_slowest_rank(self):
        # Rank 1's step lasts 2 x 5 ms before its gradients leave, so no
        # rank can finish a step sooner than that, whatever the machine.
        for hook in ("none", "fp16"):
            with self.subTest(hook=hook):
                p = run("--world", "2", "--slowdowns", "1,2", "--base-step", "0.005", "--hook", hook,
                        "--steps", "30", "--warmup", "3", "--allreduce-iters", "5")
                self.assertEqual(p.returncode, 0, p.stderr)
                out = json.loads(p.stdout.strip().splitlines()[-1])
                self.assertEqual(out["parameters"], 235146)
                self.assertEqual(out["structural_step_ms"], 10.0)
                self.assertGreaterEqual(out["step_ms"], 10.0)
                self.assertAlmostEqual(out["ratio_to_structural"], out["step_ms"] / 10.0, places=2)
                self.assertGreater(out["allreduce_fp32_ms"], 0)
                self.assertGreater(out["allreduce_fp16_ms"], 0)

    def test_bad_flags(self):
        for args, want in ((("--world", "2", "--slowdowns", "1,2,4"), "3 values for --world 2"),
                           (("--slowdowns", "2,x,4,8"), "want numbers"),
                           (("--base-step", "0"), "--base-step > 0")):
            with self.subTest(args=args):
                p = run(*args)
                self.assertEqual(p.returncode, 2)
                self.assertIn(want, p.stderr)


if __name__ == "__main__":
    unittest.main()
