#!/usr/bin/env python3
"""Env-steps/s of the benchmark market stepped from Python through the bindings (a torch tensor of
actions in, torch tensors of obs, reward and flags out through DLPack, one step per call) against
the C++ call of the same market in the same process and run (MarketEnv::step on the same device
buffers, one step per call: bench/envs.cu's "bench_ou T=1" row; and T = 2^24 / N steps per call,
its headline row), beside the same market written in torch (bench/torch_baselines/envs.py).

Usage: python_market.py <configs/markets/bench_ou.toml> [N ...]   (default 2^16 2^20)
Times three Python paths on the same market: foxhunt.Market (DLPack in and out, torch.from_dlpack of
obs, reward and both flags every step: any framework, any stream), foxhunt.MarketVectorEnv (the
Gymnasium-style wrapper) and foxhunt.TorchMarket (torch's stream, the same output tensors every
step). Prints RESULT lines and one TARGET line per size: TorchMarket / C++ at one step per call,
target >= 80% at 2^16 and >= 95% at 2^20 (issue 23).
"""
import os
import subprocess
import sys

import torch

import foxhunt

TARGETS = {1 << 16: 0.80, 1 << 20: 0.95}


def timed(fn, iters, stream):
    fn()  # warm-up
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
        fn()
    stop.record(stream)
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3 / iters


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main(argv):
    config = foxhunt.load_market_config(argv[1])
    sizes = [int(a) for a in argv[2:]] or [1 << 16, 1 << 20]
    stream = torch.cuda.current_stream()
    rows = {}
    for n in sizes:
        m = foxhunt.Market(config, n, stream=stream.cuda_stream)
        m.reset(7)
        k = 64  # distinct action rows, cycled
        acts = torch.randint(0, len(config.levels), (k, n, config.assets), dtype=torch.int32, device="cuda")
        iters = max(50, min(2000, (1 << 26) // n))
        t = [0]

        def py_step():
            out = m.step(acts[t[0] % k])
            obs, reward, term, trunc = (torch.from_dlpack(a) for a in out[:4])
            t[0] += 1

        py = median([timed(py_step, iters, stream) for _ in range(5)])

        env = foxhunt.MarketVectorEnv(config, n)  # the Gymnasium-style wrapper, same stream
        env.reset(seed=7)

        def env_step():
            env.step(acts[t[0] % k])
            t[0] += 1

        wrapped = median([timed(env_step, iters, stream) for _ in range(5)])
        env.close()

        tm = foxhunt.TorchMarket(config, n)  # torch tensors in and out, no per-step conversion
        tm.reset(7)

        def torch_market_step():
            tm.step(acts[t[0] % k])
            t[0] += 1

        direct = median([timed(torch_market_step, iters, stream) for _ in range(5)])
        del tm
        one = acts[:1]
        cpp = median([m._time_cpp_steps(one, iters) for _ in range(5)])
        big_t = max(1, (1 << 24) // n)
        big = torch.randint(0, len(config.levels), (big_t, n, config.assets), dtype=torch.int32, device="cuda")
        cpp_big = median([m._time_cpp_steps(big, 5) / big_t for _ in range(3)])
        del big
        rows[n] = (n / py, n / direct, n / cpp, n / cpp_big)
        print(f"RESULT n={n} python_steps_per_s={n / py:.4e} vector_env_steps_per_s={n / wrapped:.4e} "
              f"torch_market_steps_per_s={n / direct:.4e} cpp_T1_steps_per_s={n / cpp:.4e} "
              f"cpp_T{big_t}_steps_per_s={n / cpp_big:.4e} python_over_cpp_T1={cpp / py:.3f} "
              f"torch_market_over_cpp_T1={cpp / direct:.3f}", flush=True)

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_baselines", "envs.py")
    torch_rows = {}
    if os.path.exists(script):
        res = subprocess.run([sys.executable, script] + [str(n) for n in sizes], capture_output=True, text=True)
        for line in res.stdout.splitlines():
            if line.startswith("RESULT "):
                kv = dict(tok.split("=", 1) for tok in line.split()[1:])
                torch_rows[int(kv["n"])] = float(kv["steps_per_s"])
            elif line.startswith("SKIP "):
                print("torch baseline skipped:", line[5:])
    print(f"\n{'N':>8} {'Market':>12} {'TorchMarket':>12} {'C++ T=1':>12} {'C++ big T':>12} {'torch env':>12} "
          f"{'Market/C++':>10} {'Torch/C++':>10}")
    for n, (py, direct, c1, cb) in rows.items():
        tv = torch_rows.get(n)
        print(f"{n:>8} {py:12.4e} {direct:12.4e} {c1:12.4e} {cb:12.4e} {(f'{tv:12.4e}' if tv else '           -')} "
              f"{py / c1:10.1%} {direct / c1:10.1%}")
    for n, target in TARGETS.items():
        if n in rows:
            ratio = rows[n][1] / rows[n][2]
            print(f"TARGET python/C++ (one step per call, TorchMarket) at N=2^{n.bit_length() - 1}: {ratio:.1%} "
                  f"(target >= {target:.0%}): {'PASS' if ratio >= target else 'FAIL'}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv)
