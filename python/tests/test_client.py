"""Client against the fake node: a whole session, error replies, broken
frames, hang-ups and TCP tokens."""

import json
import struct
import unittest

import numpy as np

from meshtrain import Client, ConnectionClosedError, MeshtrainError, ProtocolError, TensorSpec, UnsupportedOpError
from tests.fake_node import FakeNode

F32 = np.dtype("<f4")
TENSORS = [TensorSpec("fc.weight", (2, 3)), TensorSpec("fc.bias", (2,))]
OPTIMIZER = [TensorSpec("opt.0.momentum_buffer", (2, 3)), TensorSpec("opt.1.momentum_buffer", (2,))]


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode()
        self.addCleanup(self.node.close)
        self.client = Client(self.node.path)
        self.addCleanup(self.client.close)

    def register(self):
        self.client.hello()
        return self.client.register("run-a", TENSORS, OPTIMIZER, train_samples=600, batch=8)

    def test_session(self):
        hello = self.client.hello()
        self.assertEqual(hello["version"], 1)
        self.assertNotIn("token", self.node.requests[0].header)
        reg = self.client.register("run-a", TENSORS, OPTIMIZER, train_samples=600, batch=8)
        self.assertFalse(reg["resume"])
        self.assertEqual(self.node.requests[1].header, {
            "op": "register", "run": "run-a",
            "tensors": [{"name": "fc.weight", "dtype": "F32", "shape": [2, 3]},
                        {"name": "fc.bias", "dtype": "F32", "shape": [2]}],
            "optimizer": [{"name": "opt.0.momentum_buffer", "dtype": "F32", "shape": [2, 3]},
                          {"name": "opt.1.momentum_buffer", "dtype": "F32", "shape": [2]}],
            "train_samples": 600, "batch": 8, "holdout": False})

        model, opt = np.arange(8, dtype=np.float32), -np.arange(8, dtype=np.float32)
        reply, delta = self.client.push(model, opt, samples=16, steps=2, loss=0.25, lr=0.1)
        self.assertEqual((reply["delta"], delta), (False, None))
        self.assertEqual(self.node.requests[-1].header, {"op": "push", "samples": 16, "steps": 2, "optimizer": True,
                                                         "loss": 0.25, "lr": 0.1})
        np.testing.assert_array_equal(self.node.requests[-1].payload, np.concatenate([model, opt]))

        merged = np.full(8, 0.5, np.float32)
        self.node.merge(merged)
        out = np.zeros(8, F32)
        reply, delta = self.client.push(model, samples=8, steps=1, loss=float("nan"), out=out)
        self.assertTrue(reply["delta"])
        self.assertIs(delta, out)
        np.testing.assert_array_equal(out, merged)
        self.assertEqual(reply["merges"], 1)
        self.assertNotIn("loss", self.node.requests[-1].header)  # NaN is not JSON: left out

        reply, pulled, pulled_opt = self.client.pull()
        self.assertEqual((reply["step"], reply["samples"], reply["optimizer"]), (3, 24, True))
        np.testing.assert_array_equal(pulled, model + merged)
        np.testing.assert_array_equal(pulled_opt, opt)

        self.client.eval(0.9, 0.3)
        self.assertEqual(self.node.evals, [(0.9, 0.3)])
        self.client.bye()
        self.assertEqual(self.node.ops(), ["hello", "register", "push", "push", "pull", "eval", "bye"])

    def test_hello_lists_the_ops_and_average_needs_it(self):
        hello = self.client.hello()
        self.assertIn("average", hello["ops"])
        self.assertTrue(self.client.supports("average"))
        self.assertFalse(self.client.supports("jump"))

    def test_average_on_an_older_node_raises_without_asking(self):
        self.node.listed_ops = None  # a node before the list: hello names no ops
        self.register()
        self.assertFalse(self.client.supports("average"))
        with self.assertRaisesRegex(UnsupportedOpError, "meshtrain fake.*average") as caught:
            self.client.average()
        self.assertEqual((caught.exception.code, caught.exception.op), ("unsupported_op", "average"))
        self.assertIsInstance(caught.exception, MeshtrainError)
        self.assertEqual(self.node.ops(), ["hello", "register"])  # nothing sent

    def test_average_before_hello_is_the_nodes_refusal(self):
        with self.assertRaisesRegex(MeshtrainError, "first request must be hello") as caught:
            self.client.average()
        self.assertNotIsInstance(caught.exception, UnsupportedOpError)

    def test_error_reply_raises_with_the_node_message(self):
        self.register()
        self.node.fail_next("eval", "bad_request", "eval needs accuracy (and loss)")
        with self.assertRaises(MeshtrainError) as cm:
            self.client.eval(0.5, 1.0)
        self.assertEqual(cm.exception.code, "bad_request")
        self.assertEqual(str(cm.exception), "eval needs accuracy (and loss)")
        self.client.eval(0.5, 1.0)  # the connection is still usable
        self.assertEqual(len(self.node.evals), 1)

    def test_error_reply_payload_is_skipped(self):
        self.register()
        self.node.fail_next("push", "bad_shape", "payload of 7 values, want 8", payload=np.ones(3, np.float32))
        with self.assertRaisesRegex(MeshtrainError, "want 8"):
            self.client.push(np.zeros(8, np.float32), samples=1, steps=1)
        self.client.eval(0.5, 1.0)  # the stream is still in step
        self.assertEqual(self.node.ops()[-1], "eval")

    def test_node_checks_reach_the_caller(self):
        self.client.hello()
        with self.assertRaises(MeshtrainError) as cm:
            self.client.pull()
        self.assertEqual(cm.exception.code, "not_registered")
        self.client.register("run-a", TENSORS, OPTIMIZER, train_samples=600, batch=8)
        with self.assertRaises(MeshtrainError) as cm:
            self.client.push(np.full(8, np.inf, np.float32), samples=1, steps=1)
        self.assertEqual(cm.exception.code, "non_finite")

    def test_bad_magic_raises_protocol_error_and_closes(self):
        self.node.reply_raw("hello", b"MTTX" + struct.pack("<IQ", 2, 0) + b"{}")
        with self.assertRaisesRegex(ProtocolError, "magic"):
            self.client.hello()
        self.assertTrue(self.client.closed)
        with self.assertRaises(ConnectionClosedError):
            self.client.hello()

    def test_delta_of_the_wrong_size_is_a_protocol_error(self):
        self.register()
        body = json.dumps({"ok": True, "delta": True, "merges": 1, "run": {}}).encode()
        self.node.reply_raw("push", b"MTT1" + struct.pack("<IQ", len(body), 12) + body + b"\0" * 12)
        with self.assertRaisesRegex(ProtocolError, "want 32"):
            self.client.push(np.zeros(8, np.float32), samples=1, steps=1)
        self.assertTrue(self.client.closed)

    def test_hang_up_raises_connection_closed(self):
        self.register()
        self.node.hang_up("push")
        with self.assertRaises(ConnectionError) as cm:
            self.client.push(np.zeros(8, np.float32), samples=1, steps=1)
        self.assertIsInstance(cm.exception, ConnectionClosedError)
        self.assertTrue(self.client.closed)

    def test_bad_names_are_refused_before_sending(self):
        self.client.hello()
        with self.assertRaisesRegex(ValueError, "fc weight"):
            self.client.register("run-a", [TensorSpec("fc weight", (2,))], train_samples=1, batch=1)
        self.assertEqual(self.node.ops(), ["hello"])

    def test_delta_buffer_is_checked_before_sending(self):
        self.register()
        with self.assertRaisesRegex(ValueError, "8 values"):
            self.client.push(np.zeros(8, np.float32), samples=1, steps=1, out=np.zeros(7, np.float32))
        self.assertEqual(self.node.ops(), ["hello", "register"])


class TCPTest(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode(tcp=True, token="s3cret")
        self.addCleanup(self.node.close)

    def test_token_is_sent(self):
        with Client(address=self.node.address, token="s3cret") as client:
            self.assertEqual(client.hello()["version"], 1)
        self.assertEqual(self.node.requests[0].header, {"op": "hello", "version": 1, "token": "s3cret"})

    def test_wrong_token_is_unauthorized(self):
        with Client(address=self.node.address, token="guess") as client, self.assertRaises(MeshtrainError) as cm:
            client.hello()
        self.assertEqual(cm.exception.code, "unauthorized")

    def test_tcp_needs_a_token(self):
        with self.assertRaisesRegex(ValueError, "token"):
            Client(address=self.node.address)
        with self.assertRaisesRegex(ValueError, "exactly one"):
            Client()


if __name__ == "__main__":
    unittest.main()
