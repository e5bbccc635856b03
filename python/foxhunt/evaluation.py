"""foxhunt eval from Python: the backtest report (docs/eval.md) as a dict.

    report = foxhunt.evaluate("runs/ppo_market-2026...", episodes=1000, cost_multipliers=(0, 1, 2))
    report["runs"][0]["metrics"]...

This runs the `foxhunt` program itself (the same code and report as the command line), found as
`foxhunt_bin`, else $FOXHUNT_BIN, else the installed tree's bin/foxhunt beside this package
(<prefix>/lib/python/foxhunt -> <prefix>/bin), else the build tree's bin/foxhunt, else `foxhunt` on
PATH. Bad arguments raise ValueError with the program's message (it names the option); a failed
evaluation raises EvalError with it.
"""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile


class EvalError(RuntimeError):
    """foxhunt eval failed (a checkpoint that does not fit its config, no device, ...)."""


def find_foxhunt(foxhunt_bin=None):
    """The foxhunt executable evaluate() runs (see the module docstring), or None."""
    here = pathlib.Path(__file__).resolve().parent
    candidates = [foxhunt_bin, os.environ.get("FOXHUNT_BIN"),
                  here.parents[2] / "bin" / "foxhunt",  # <prefix>/lib/python/foxhunt
                  here.parents[1] / "bin" / "foxhunt"]  # <build>/python/foxhunt
    for c in candidates:
        if c and pathlib.Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("foxhunt")


def evaluate(checkpoints, *, config=None, episodes=100, seed=None, cost_multipliers=(1.0,), split=None,
             report_dir=None, foxhunt_bin=None, timeout=None):
    """Runs `foxhunt eval` on one or more checkpoints (or run directories) and returns report.json
    as a dict, with "table" (the printed table) and "report_dir" added. Without report_dir the
    files go to a temporary folder that is removed afterwards."""
    exe = find_foxhunt(foxhunt_bin)
    if exe is None:
        raise FileNotFoundError("the foxhunt program was not found: pass foxhunt_bin=, set FOXHUNT_BIN, or put "
                                "foxhunt on PATH (scripts/package.sh installs it in <dist>/bin)")
    if isinstance(checkpoints, (str, os.PathLike)):
        checkpoints = [checkpoints]
    args = [exe, "eval"]
    for c in checkpoints:
        args += ["--checkpoint", os.fspath(c)]
    if config is not None:
        args += ["--config", os.fspath(config)]
    args += ["--episodes", str(int(episodes))]
    if seed is not None:
        args += ["--seed", str(seed)]
    args += ["--cost-multipliers", ",".join(repr(float(m)) for m in cost_multipliers)]
    if split is not None:
        args += ["--split", str(split)]
    with tempfile.TemporaryDirectory(prefix="foxhunt-eval-") as tmp:
        out_dir = pathlib.Path(report_dir) if report_dir is not None else pathlib.Path(tmp)
        args += ["--report-dir", str(out_dir)]
        res = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        message = (res.stderr.strip() or res.stdout.strip()).replace("foxhunt eval: ", "", 1)
        if res.returncode == 2:
            raise ValueError(message)
        if res.returncode != 0:
            raise EvalError(message or f"foxhunt eval exited with {res.returncode}")
        report = json.loads((out_dir / "report.json").read_text())
    report["table"] = res.stdout
    report["report_dir"] = str(out_dir) if report_dir is not None else None
    return report
