"""The optimizer state as named float32 tensors: layout, round trips, and
the zero-rate step that creates a lazily-built state."""

import copy
import unittest

import numpy as np
import torch

from meshtrain import OptimizerState, init_optimizer_state
from tests.support import flat_params, small_model, train_step

SHAPES = [(3, 4), (3,), (2, 3), (2,)]


def scramble(optimizer):
    """Overwrite every state tensor, so a round trip must restore it."""
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value):
                value.fill_(123.0)


class RoundTripTest(unittest.TestCase):
    def check_round_trip(self, optimizer):
        want = copy.deepcopy(optimizer.state_dict()["state"])
        state = OptimizerState(optimizer)
        flat = state.flatten()
        self.assertEqual(flat.dtype, np.dtype("<f4"))
        self.assertEqual(flat.size, state.size)
        scramble(optimizer)
        state.unflatten(flat)
        got = optimizer.state_dict()["state"]
        self.assertEqual(got.keys(), want.keys())
        for index in want:
            self.assertEqual(got[index].keys(), want[index].keys())
            for key, value in want[index].items():
                with self.subTest(index=index, key=key):
                    if torch.is_tensor(value):
                        self.assertEqual((got[index][key].dtype, got[index][key].shape), (value.dtype, value.shape))
                        self.assertTrue(torch.equal(got[index][key], value))
                    else:
                        self.assertEqual(got[index][key], value)
        np.testing.assert_array_equal(state.flatten(), flat)
        return state

    def test_sgd_momentum(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for i in range(3):
            train_step(model, optimizer, i)
        state = self.check_round_trip(optimizer)
        self.assertEqual([(s.name, s.shape) for s in state.specs],
                         [(f"opt.{i}.momentum_buffer", shape) for i, shape in enumerate(SHAPES)])

    def test_adam(self):
        model = small_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for i in range(3):
            train_step(model, optimizer, i)
        state = self.check_round_trip(optimizer)
        want = []
        for i, shape in enumerate(SHAPES):
            want += [(f"opt.{i}.exp_avg", shape), (f"opt.{i}.exp_avg_sq", shape), (f"opt.{i}.step", (1,))]
        self.assertEqual([(s.name, s.shape) for s in state.specs], want)
        step = optimizer.state[next(iter(model.parameters()))]["step"]
        self.assertEqual(float(step), 3.0)

    def test_numbers_kept_and_other_values_left_out(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train_step(model, optimizer, 0)
        p = next(iter(model.parameters()))
        optimizer.state[p].update(count=7, scale=0.25, flag=True, note="x", nothing=None)
        state = OptimizerState(optimizer)
        self.assertEqual([s.name for s in state.specs if s.name.startswith("opt.0.")],
                         ["opt.0.count", "opt.0.momentum_buffer", "opt.0.scale"])
        flat = state.flatten()
        optimizer.state[p].update(count=0, scale=0.0)
        state.unflatten(flat)
        self.assertEqual((optimizer.state[p]["count"], optimizer.state[p]["scale"]), (7, 0.25))
        self.assertIsInstance(optimizer.state[p]["count"], int)

    def test_layout_change_is_refused(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train_step(model, optimizer, 0)
        state = OptimizerState(optimizer)
        optimizer.state[next(iter(model.parameters()))]["extra"] = torch.zeros(2)
        with self.assertRaisesRegex(RuntimeError, "layout"):
            state.flatten()

    def test_wrong_size_is_refused(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train_step(model, optimizer, 0)
        state = OptimizerState(optimizer)
        with self.assertRaisesRegex(ValueError, f"want {state.size}"):
            state.unflatten(np.zeros(state.size + 1, np.float32))


class InitTest(unittest.TestCase):
    def check_init(self, optimizer, model):
        before = flat_params(model)
        groups = [dict(g, params=None) for g in optimizer.param_groups]
        init_optimizer_state(optimizer)
        self.assertTrue(torch.equal(flat_params(model), before), "the zero-rate step moved the parameters")
        self.assertEqual([dict(g, params=None) for g in optimizer.param_groups], groups)
        self.assertTrue(all(p.grad is None for p in model.parameters()))
        self.assertEqual(len(optimizer.state), len(SHAPES))

    def test_sgd_with_weight_decay(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        self.check_init(optimizer, model)
        for state in optimizer.state.values():
            self.assertFalse(state["momentum_buffer"].any())

    def test_adam_two_groups(self):
        model = small_model()
        first, second = model[0], model[2]
        optimizer = torch.optim.Adam([{"params": first.parameters(), "lr": 0.01},
                                      {"params": second.parameters(), "lr": 0.001, "weight_decay": 0.1}])
        self.check_init(optimizer, model)
        for state in optimizer.state.values():
            self.assertFalse(state["exp_avg"].any())
            self.assertEqual(float(state["step"]), 1.0)


if __name__ == "__main__":
    unittest.main()
