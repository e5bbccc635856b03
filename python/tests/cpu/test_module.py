"""CPU tests of the foxhunt module (no device needed): configs, errors and argument checks. The
device tests are in python/tests/gpu (pytest on the GPU host); here they skip with the reason."""

import os
import pathlib
import tempfile
import unittest

import fake_dlpack as fd
import foxhunt

ROOT = pathlib.Path(os.environ.get("FOXHUNT_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[3]))
MARKETS = ROOT / "configs" / "markets"


class ConfigTest(unittest.TestCase):
    def test_every_shipped_market_loads_with_its_shape(self):
        files = sorted(MARKETS.glob("*.toml"))
        self.assertGreater(len(files), 3)
        for f in files:
            c = foxhunt.load_market_config(f)
            self.assertGreaterEqual(c.assets, 1, f)
            self.assertIn(c.action, ("discrete", "continuous"))

    def test_bench_market_fields_and_obs_dim(self):
        c = foxhunt.load_market_config(str(MARKETS / "bench_ou.toml"))
        self.assertEqual((c.assets, c.window, c.episode_length), (1, 32, 256))
        self.assertEqual((c.process, c.action, c.reward), ("ou", "discrete", "pnl"))
        self.assertEqual(c.levels, [-1.0, 0.0, 1.0])
        # window * assets + assets + 3 (rl/envs/market.hpp)
        self.assertEqual(c.obs_dim, 32 * 1 + 1 + 3)

    def test_to_toml_reads_back_to_the_same_config(self):
        c = foxhunt.load_market_config(MARKETS / "ou8_correlated.toml")
        self.assertEqual(foxhunt.parse_market_config(c.to_toml(), "roundtrip"), c)

    def test_bad_value_names_key_file_and_line(self):
        text = "[market]\nassets = 1\n\n[execution]\nfee_bps = -3.0\n"
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "bad.toml"
            path.write_text(text)
            with self.assertRaises(foxhunt.ConfigError) as cm:
                foxhunt.load_market_config(path)
        msg = str(cm.exception)
        self.assertIn("bad.toml:5", msg)
        self.assertIn("execution.fee_bps", msg)
        self.assertIsInstance(cm.exception, ValueError)
        self.assertTrue(any("execution.fee_bps" in e for e in cm.exception.errors))

    def test_unknown_key_and_every_problem_reported(self):
        text = "[market]\nasets = 2\nwindow = 0\n"
        with self.assertRaises(foxhunt.ConfigError) as cm:
            foxhunt.parse_market_config(text, "inline.toml")
        msg = str(cm.exception)
        self.assertIn("inline.toml:2", msg)
        self.assertIn("market.asets", msg)
        self.assertIn("market.window", msg)
        self.assertGreaterEqual(len(cm.exception.errors), 2)

    def test_missing_file_is_an_error_naming_it(self):
        with self.assertRaises(Exception) as cm:
            foxhunt.load_market_config("/nonexistent/market.toml")
        self.assertIn("/nonexistent/market.toml", str(cm.exception))


class ActionCheckTest(unittest.TestCase):
    """foxhunt.check_actions runs Market.step's checks without a device."""

    def setUp(self):
        self.discrete = foxhunt.load_market_config(MARKETS / "bench_ou.toml")  # 1 asset, 3 levels
        self.continuous = foxhunt.load_market_config(MARKETS / "ou4_continuous.toml")
        self.assertEqual(self.continuous.action, "continuous")
        fd.deleted.clear()

    def check(self, config, n, arr, device=0):
        return foxhunt.check_actions(config, n, arr, device)

    def test_accepted_shapes_and_steps(self):
        self.assertEqual(self.check(self.discrete, 8, fd.FakeArray((8, 1))), 1)
        self.assertEqual(self.check(self.discrete, 8, fd.FakeArray((8,))), 1)
        self.assertEqual(self.check(self.discrete, 8, fd.FakeArray((5, 8, 1))), 5)
        a = self.continuous.assets
        self.assertEqual(self.check(self.continuous, 8, fd.FakeArray((8, a), code=fd.FLOAT)), 1)
        self.assertEqual(self.check(self.continuous, 8, fd.FakeArray((3, 8, a), code=fd.FLOAT)), 3)
        self.assertEqual(len(fd.deleted), 5)  # each accepted tensor was given back

    def test_wrong_dtype_says_what_was_expected(self):
        with self.assertRaisesRegex(ValueError, r"actions must be int32 .*discrete.*got float32"):
            self.check(self.discrete, 8, fd.FakeArray((8, 1), code=fd.FLOAT))
        with self.assertRaisesRegex(ValueError, r"actions must be int32 .*got int64"):
            self.check(self.discrete, 8, fd.FakeArray((8, 1), bits=64))
        with self.assertRaisesRegex(ValueError, r"actions must be float32 .*continuous.*got int32"):
            self.check(self.continuous, 8, fd.FakeArray((8, self.continuous.assets)))
        with self.assertRaisesRegex(ValueError, r"got bfloat16"):
            self.check(self.continuous, 8, fd.FakeArray((8, self.continuous.assets), code=fd.BFLOAT, bits=16))

    def test_wrong_shape_says_what_was_expected(self):
        with self.assertRaisesRegex(ValueError, r"shape \(N, assets\) = \(8, 1\).*got \(8, 3\)"):
            self.check(self.discrete, 8, fd.FakeArray((8, 3)))
        with self.assertRaisesRegex(ValueError, r"got \(7, 1\)"):
            self.check(self.discrete, 8, fd.FakeArray((7, 1)))
        with self.assertRaisesRegex(ValueError, r"\(T, 8, 4\) for T steps.*got \(2, 2, 8, 4\)"):
            self.check(self.continuous, 8, fd.FakeArray((2, 2, 8, 4), code=fd.FLOAT))
        # (N,) only where there is one asset
        with self.assertRaisesRegex(ValueError, r"got \(8,\)"):
            self.check(self.continuous, 8, fd.FakeArray((8,), code=fd.FLOAT))

    def test_wrong_device_says_which(self):
        with self.assertRaisesRegex(ValueError, r"actions must be on cuda:0 \(the market's device\); got cpu"):
            self.check(self.discrete, 8, fd.FakeArray((8, 1), device=(fd.KCPU, 0)))
        with self.assertRaisesRegex(ValueError, r"on cuda:1 .*got cuda:0"):
            self.check(self.discrete, 8, fd.FakeArray((8, 1)), device=1)

    def test_non_contiguous_is_refused(self):
        with self.assertRaisesRegex(ValueError, r"contiguous"):
            self.check(self.continuous, 8, fd.FakeArray((8, 4), code=fd.FLOAT, strides=(1, 8)))
        # compact strides given explicitly are fine
        self.assertEqual(self.check(self.continuous, 8, fd.FakeArray((8, 4), code=fd.FLOAT, strides=(4, 1))), 1)

    def test_not_an_array(self):
        with self.assertRaisesRegex(TypeError, r"DLPack.*got a list"):
            self.check(self.discrete, 8, [[0]] * 8)

    def test_the_check_asks_for_no_synchronization(self):
        arr = fd.FakeArray((8, 1))
        self.check(self.discrete, 8, arr)
        self.assertEqual(arr.streams, [-1])


class MarketArgumentTest(unittest.TestCase):
    def setUp(self):
        self.config = foxhunt.load_market_config(MARKETS / "bench_ou.toml")

    def test_bad_arguments_are_refused_before_any_device_work(self):
        with self.assertRaisesRegex(ValueError, r"num_envs must be in \[1, 2\^31\] \(got 0\)"):
            foxhunt.Market(self.config, 0)
        with self.assertRaisesRegex(ValueError, r"obs_dtype must be \"float32\" or \"bfloat16\" \(got \"float16\"\)"):
            foxhunt.Market(self.config, 4, obs_dtype="float16")
        with self.assertRaisesRegex(ValueError, r"device must be >= 0"):
            foxhunt.Market(self.config, 4, device=-1)
        with self.assertRaises(foxhunt.ConfigError):
            foxhunt.Market(str(ROOT / "configs" / "ppo_market.toml"), 4)  # a run config, not a market

    @unittest.skipIf(foxhunt.device_count() > 0, "a CUDA device is present: the device tests cover Market")
    def test_without_a_device_market_says_why(self):
        self.assertNotEqual(foxhunt.cuda_unavailable_reason(), "")
        with self.assertRaisesRegex(RuntimeError, r"foxhunt.Market needs a CUDA device: "):
            foxhunt.Market(self.config, 4)


class SpacesTest(unittest.TestCase):
    def test_spaces_from_the_config(self):
        from foxhunt import vector_env

        c = foxhunt.load_market_config(MARKETS / "ou4_continuous.toml")
        obs1, act1, obs, act = vector_env.spaces(c, 16)
        self.assertEqual(tuple(obs1.shape), (c.obs_dim,))
        self.assertEqual(tuple(obs.shape), (16, c.obs_dim))
        self.assertEqual(tuple(act.shape), (16, c.assets))
        self.assertEqual((float(act1.low if not hasattr(act1.low, "min") else act1.low.min()),
                          float(act1.high if not hasattr(act1.high, "max") else act1.high.max())), (-1.0, 1.0))
        d = foxhunt.load_market_config(MARKETS / "bench_ou.toml")
        _, act1, _, act = vector_env.spaces(d, 16)
        self.assertEqual(tuple(act.shape), (16, 1))
        self.assertEqual([int(v) for v in list(act1.nvec)], [3])


@unittest.skipIf(foxhunt.find_foxhunt() is None, "the foxhunt program was not found (FOXHUNT_BIN)")
class EvaluateTest(unittest.TestCase):
    """foxhunt.evaluate runs `foxhunt eval`; its argument errors come back as ValueError."""

    def test_missing_checkpoint_names_the_option(self):
        with self.assertRaisesRegex(ValueError, r"--checkpoint") as cm:
            foxhunt.evaluate("/nonexistent/run", episodes=4)
        self.assertIn("/nonexistent/run", str(cm.exception))

    def test_bad_cost_multipliers_name_the_option(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(ValueError, r"--cost-multipliers"):
                foxhunt.evaluate(d, cost_multipliers=(1.0, 1.0))

    def test_out_of_range_flags_are_value_errors(self):
        # Refused by the command line's own checks (CLI11), which leave with the same code 2.
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(ValueError, r"--episodes"):
                foxhunt.evaluate(d, episodes=0)
            with self.assertRaisesRegex(ValueError, r"--seed"):
                foxhunt.evaluate(d, seed=-1)


@unittest.skipIf(foxhunt.device_count() == 0,
                 "no CUDA device (" + foxhunt.cuda_unavailable_reason() + "): the device tests are "
                 "python/tests/gpu, run by scripts/python-gpu-host.sh")
class DeviceSmokeTest(unittest.TestCase):
    def test_reset_exports_a_device_array(self):
        m = foxhunt.Market(MARKETS / "bench_ou.toml", 8)
        obs = m.reset(1)
        self.assertEqual(obs.shape, (8, m.obs_dim))
        self.assertEqual(obs.__dlpack_device__(), (2, 0))


if __name__ == "__main__":
    unittest.main()
