"""Mesh, the PyTorch integration, against the fake node."""

import unittest
import warnings

import numpy as np
import torch

import meshtrain
from meshtrain import ConnectionClosedError, MeshtrainError, OptimizerState, init_optimizer_state
from tests.fake_node import FakeNode
from tests.support import FakeClock, flat_params, small_model, train_step

N_PARAMS = 23


class MeshTest(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode()
        self.addCleanup(self.node.close)
        self.clock = FakeClock()
        self.model = small_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)

    def mesh(self, **kw):
        """A Mesh on the fake node, closed (without failing) at the end."""
        args = dict(run="test-run", train_samples=600, batch=8, socket=self.node.path, clock=self.clock)
        mesh = meshtrain.Mesh(self.model, self.optimizer, **(args | kw))
        self.addCleanup(mesh.client.close)
        return mesh

    def pushes(self):
        """How many pushes the node received."""
        return self.node.ops().count("push")

    def last(self, op):
        """The last request of this op the node received."""
        return [r for r in self.node.requests if r.header["op"] == op][-1]

    def test_register_and_initial_push(self):
        mesh = self.mesh()
        self.assertFalse(mesh.resumed)
        self.assertEqual(self.node.ops(), ["hello", "register", "push"])
        reg = self.last("register").header
        self.assertEqual([(t["name"], t["shape"]) for t in reg["tensors"]],
                         [("0.weight", [3, 4]), ("0.bias", [3]), ("2.weight", [2, 3]), ("2.bias", [2])])
        self.assertEqual([t["name"] for t in reg["optimizer"]], [f"opt.{i}.momentum_buffer" for i in range(4)])
        self.assertEqual((reg["run"], reg["train_samples"], reg["batch"], reg["holdout"]), ("test-run", 600, 8, False))
        push = self.last("push")
        self.assertEqual({k: push.header[k] for k in ("samples", "steps", "optimizer")},
                         {"samples": 0, "steps": 0, "optimizer": True})
        self.assertEqual(push.payload.size, 2 * N_PARAMS)
        np.testing.assert_array_equal(push.payload[:N_PARAMS], flat_params(self.model).numpy())
        np.testing.assert_array_equal(push.payload[N_PARAMS:], 0)  # zero momentum from the zero-rate step
        self.assertEqual((mesh.peer_id, mesh.fingerprint), ("12D3KooWFakeNode", "f00d" * 8))

    def test_delta_keeps_the_local_steps(self):
        mesh = self.mesh()
        s0 = self.last("push").payload[:N_PARAMS]
        train_step(self.model, self.optimizer, seed=1)  # the local step L, taken after the snapshot
        local = flat_params(self.model).numpy()
        self.assertFalse(np.array_equal(local, s0))
        merged = np.random.default_rng(2).standard_normal(N_PARAMS).astype(np.float32)
        self.node.merge(merged)  # the node merged M into its copy of S0 meanwhile
        self.assertTrue(mesh.sync())
        np.testing.assert_array_equal(self.last("push").payload, local)  # S0 + L
        np.testing.assert_array_equal(flat_params(self.model).numpy(), local + merged)  # S0 + L + M, exactly
        np.testing.assert_array_equal(self.node.model, local + merged)  # trainer and node agree
        self.assertEqual(mesh.merges, 1)
        self.assertFalse(mesh.sync())  # the delta was sent once

    def test_averaged_on_an_older_node_scores_the_trained_weights(self):
        self.node.listed_ops = None  # a node before the average op: hello names no ops
        mesh = self.mesh()
        train_step(self.model, self.optimizer, seed=1)
        live = flat_params(self.model).numpy().copy()
        self.node.average = np.zeros(N_PARAMS, np.float32)  # never sent: the node would not know the op
        with self.assertWarnsRegex(RuntimeWarning, "meshtrain fake.*average"):
            with mesh.averaged() as averaged:
                self.assertFalse(averaged)
                np.testing.assert_array_equal(flat_params(self.model).numpy(), live)
                with self.assertRaises(RuntimeError):
                    mesh.sync()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # it warns once, not at every evaluation
            with mesh.averaged() as averaged:
                self.assertFalse(averaged)
        mesh.sync()  # usable again after the block
        np.testing.assert_array_equal(flat_params(self.model).numpy(), live)
        self.assertNotIn("average", self.node.ops())

    def test_averaged_loads_the_nodes_average_for_the_block(self):
        mesh = self.mesh()
        train_step(self.model, self.optimizer, seed=1)
        live = flat_params(self.model).numpy().copy()
        average = np.random.default_rng(4).standard_normal(N_PARAMS).astype(np.float32)
        self.node.average = average
        with mesh.averaged() as averaged:
            self.assertTrue(averaged)
            np.testing.assert_array_equal(flat_params(self.model).numpy(), average)
        np.testing.assert_array_equal(flat_params(self.model).numpy(), live)
        with self.assertRaises(RuntimeError):
            with mesh.averaged():
                raise RuntimeError("the evaluation failed")
        np.testing.assert_array_equal(flat_params(self.model).numpy(), live)
        self.node.average = None  # a node with --ema 0 sends its model
        with mesh.averaged() as averaged:
            self.assertFalse(averaged)
            np.testing.assert_array_equal(flat_params(self.model).numpy(), self.node.model)
        np.testing.assert_array_equal(flat_params(self.model).numpy(), live)
        pushes = self.pushes()
        with mesh.averaged():
            with self.assertRaises(RuntimeError):
                mesh.sync()
            mesh.push_every = 0
            with self.assertRaises(RuntimeError):
                mesh.step(8)
        self.assertEqual(self.pushes(), pushes)  # nothing pushed from inside the block
        np.testing.assert_array_equal(flat_params(self.model).numpy(), live)
        self.node.fail_next("average", "bad_request", "no model")
        with self.assertRaisesRegex(MeshtrainError, "no model"):
            with mesh.averaged():
                self.fail("the block ran without the node's model")
        np.testing.assert_array_equal(flat_params(self.model).numpy(), live)

    def test_resume_loads_model_and_optimizer(self):
        twin = torch.optim.SGD(small_model().parameters(), lr=0.1, momentum=0.9)
        init_optimizer_state(twin)
        rng = np.random.default_rng(3)
        model = rng.standard_normal(N_PARAMS).astype(np.float32)
        opt = rng.standard_normal(OptimizerState(twin).size).astype(np.float32)
        self.node.preload(model, opt, step=40, samples=320)
        mesh = self.mesh()
        self.assertTrue(mesh.resumed)
        self.assertEqual(self.node.ops(), ["hello", "register", "pull"])
        self.assertEqual((mesh.samples, mesh.step_count), (320, 40))
        np.testing.assert_array_equal(flat_params(self.model).numpy(), model)
        np.testing.assert_array_equal(mesh.optimizer_state.flatten(), opt)
        mesh.step(8)
        self.assertEqual((mesh.samples, mesh.step_count), (328, 41))

    def test_resume_without_optimizer_state(self):
        model = np.arange(N_PARAMS, dtype=np.float32)
        self.node.preload(model)
        mesh = self.mesh()
        self.assertTrue(mesh.resumed)
        np.testing.assert_array_equal(flat_params(self.model).numpy(), model)
        np.testing.assert_array_equal(mesh.optimizer_state.flatten(), 0)

    def test_follow_schedule(self):
        self.optimizer = torch.optim.SGD([{"params": self.model[0].parameters(), "lr": 0.2},
                                          {"params": self.model[2].parameters()}], lr=0.1, momentum=0.9)
        mesh = self.mesh(follow_schedule=True)
        self.node.set_run(lr_factor=0.5)
        mesh.sync()
        self.assertEqual(mesh.lr_factor, 0.5)
        self.assertEqual([g["lr"] for g in self.optimizer.param_groups], [0.1, 0.05])
        self.node.set_run(lr_factor=0.25)
        mesh.sync()
        self.assertEqual([g["lr"] for g in self.optimizer.param_groups], [0.05, 0.025])
        self.assertEqual(self.last("push").header["lr"], 0.1)  # the rate in use when pushed

    def test_schedule_not_followed_by_default(self):
        mesh = self.mesh()
        self.node.set_run(lr_factor=0.5)
        mesh.sync()
        self.assertEqual((mesh.lr_factor, self.optimizer.param_groups[0]["lr"]), (0.5, 0.1))

    def test_push_cadence(self):
        mesh = self.mesh()
        self.clock.t = 0.05
        self.assertFalse(mesh.step(8, loss=1.0))
        self.assertEqual(self.pushes(), 1)
        self.clock.t = 0.1
        self.node.merge(np.ones(N_PARAMS, np.float32))
        self.assertTrue(mesh.step(8, loss=2.0))
        self.assertEqual(self.pushes(), 2)
        self.assertEqual(self.last("push").header,
                         {"op": "push", "samples": 16, "steps": 2, "optimizer": False, "loss": 1.5, "lr": 0.1})
        self.clock.t = 0.15
        mesh.step(8)
        self.assertEqual(self.pushes(), 2)
        self.clock.t = 10.0  # optimizer_every has passed too
        mesh.step(8)
        self.assertEqual(self.pushes(), 3)
        self.assertEqual({k: self.last("push").header.get(k) for k in ("samples", "steps", "optimizer", "loss")},
                         {"samples": 16, "steps": 2, "optimizer": True, "loss": None})
        self.clock.t = 10.25
        mesh.step(8)
        self.assertEqual(self.pushes(), 4)
        self.assertFalse(self.last("push").header["optimizer"])

    def test_close_pushes_optimizer_and_says_bye(self):
        mesh = self.mesh()
        self.clock.t = 0.01
        mesh.step(8)
        mesh.close()
        self.assertEqual(self.node.ops()[-2:], ["push", "bye"])
        self.assertEqual({k: self.last("push").header[k] for k in ("samples", "steps", "optimizer")},
                         {"samples": 8, "steps": 1, "optimizer": True})
        self.assertTrue(mesh.client.closed)
        mesh.close()  # idempotent
        self.assertEqual(self.node.ops()[-1], "bye")

    def test_context_manager(self):
        with self.mesh() as mesh:
            mesh.report_eval(0.75, 0.5)
        self.assertEqual(self.node.ops()[-3:], ["eval", "push", "bye"])
        self.assertEqual(self.node.evals, [(0.75, 0.5)])

    def test_context_manager_keeps_the_first_error(self):
        with self.assertRaises(ConnectionClosedError):
            with self.mesh() as mesh:
                self.node.hang_up("push")
                mesh.sync()
        self.assertTrue(mesh.client.closed)

    def test_stop(self):
        mesh = self.mesh()
        self.assertFalse(mesh.stopped)
        self.node.merge(np.ones(N_PARAMS, np.float32))
        self.node.set_run(stop="accuracy")
        before = flat_params(self.model)
        self.assertFalse(mesh.sync())  # once stopped, no delta
        self.assertTrue(mesh.stopped)
        self.assertEqual(mesh.run["stop"], "accuracy")
        self.assertTrue(torch.equal(flat_params(self.model), before))

    def test_eval_error_raises(self):
        mesh = self.mesh()
        self.node.fail_next("eval", "bad_request", "accuracy 2 is not in [0, 1]")
        with self.assertRaisesRegex(MeshtrainError, "not in"):
            mesh.report_eval(2, 0.1)

    def test_node_error_raises_with_its_message(self):
        self.node.fail_next("register", "mismatch", "the registration differs from the node's run: epochs")
        with self.assertRaises(MeshtrainError) as cm:
            self.mesh()
        self.assertEqual(cm.exception.code, "mismatch")
        self.assertEqual(str(cm.exception), "the registration differs from the node's run: epochs")

    def test_float64_parameter_is_a_type_error_before_connecting(self):
        self.model[2].double()
        nowhere = self.node.path + ".missing"  # connecting would raise FileNotFoundError
        with self.assertRaisesRegex(TypeError, r"'2\.weight' is torch\.float64"):
            self.mesh(socket=nowhere)
        self.assertEqual(self.node.connections, 0)

    def test_frozen_parameters_are_not_registered(self):
        self.model[0].weight.requires_grad_(False)
        self.mesh()
        self.assertEqual([t["name"] for t in self.last("register").header["tensors"]],
                         ["0.bias", "2.weight", "2.bias"])
        self.assertEqual([t["name"] for t in self.last("register").header["optimizer"]],
                         ["opt.1.momentum_buffer", "opt.2.momentum_buffer", "opt.3.momentum_buffer"])
        self.assertEqual(self.last("push").payload.size, 2 * (N_PARAMS - 12))


class TCPMeshTest(unittest.TestCase):
    def test_address_and_token(self):
        with FakeNode(tcp=True, token="t0ken") as node:
            model = small_model()
            optimizer = torch.optim.Adam(model.parameters())
            with meshtrain.Mesh(model, optimizer, run="tcp-run", train_samples=600, batch=8,
                                address=node.address, token="t0ken", clock=FakeClock()) as mesh:
                self.assertFalse(mesh.resumed)
            self.assertEqual(node.requests[0].header["token"], "t0ken")
            self.assertEqual(node.ops(), ["hello", "register", "push", "push", "bye"])


if __name__ == "__main__":
    unittest.main()
