#!/usr/bin/env python3
"""Writes configs/markets/data/example_bars.csv: daily OHLCV bars of one synthetic asset, the
history configs/markets/example_bars.toml replays (no download; the standard library only).

The log close is a slow trend (GBM: 6% a year, 8% volatility) plus a mean-reverting deviation
(OU: kappa 40 a year, a half-life of about four days) whose volatility switches between a calm and a
turbulent regime (a two-state Markov chain, about 60 business days per visit). A window of recent
returns then says something about the next ones, as in a mean-reverting market, and the regimes
change what it says over time, which is what a walk-forward split is for.

Business days (Monday to Friday) from 2008-01-02 to 2021-12-31, about 3650 rows. The seed is
fixed: running the script again writes the same file byte for byte.

    python3 scripts/make_example_bars.py [--out PATH] [--seed N]
"""

import argparse
import datetime
import math
import os
import random

START = datetime.date(2008, 1, 2)
END = datetime.date(2021, 12, 31)
DT = 1.0 / 252.0

TREND_MU, TREND_SIGMA = 0.06, 0.08
OU_KAPPA = 40.0
OU_SIGMA = (0.25, 0.60)  # annual volatility of the deviation: calm, turbulent
SWITCH = (1.0 / 60.0, 1.0 / 30.0)  # per-day probability of leaving the regime
INITIAL = 100.0


def business_days(start, end):
    d = start
    while d <= end:
        if d.weekday() < 5:
            yield d
        d += datetime.timedelta(days=1)


def bars(seed):
    rng = random.Random(seed)
    trend = math.log(INITIAL)
    dev = 0.0
    regime = 0
    prev_close = INITIAL
    decay = math.exp(-OU_KAPPA * DT)
    for day in business_days(START, END):
        if rng.random() < SWITCH[regime]:
            regime = 1 - regime
        trend += (TREND_MU - 0.5 * TREND_SIGMA**2) * DT + TREND_SIGMA * math.sqrt(DT) * rng.gauss(0.0, 1.0)
        noise = OU_SIGMA[regime] * math.sqrt((1.0 - decay * decay) / (2.0 * OU_KAPPA))
        dev = dev * decay + noise * rng.gauss(0.0, 1.0)
        close = math.exp(trend + dev)
        day_vol = OU_SIGMA[regime] * math.sqrt(DT)
        open_ = prev_close * math.exp(0.2 * day_vol * rng.gauss(0.0, 1.0))
        high = max(open_, close) * math.exp(0.5 * day_vol * abs(rng.gauss(0.0, 1.0)))
        low = min(open_, close) * math.exp(-0.5 * day_vol * abs(rng.gauss(0.0, 1.0)))
        volume = int(1_000_000 * math.exp(0.3 * rng.gauss(0.0, 1.0) + 0.5 * regime))
        prev_close = close
        yield day, open_, high, low, close, volume


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "configs", "markets", "data", "example_bars.csv")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.normpath(default), help="CSV to write (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=20080102, help="random seed (default: %(default)s)")
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rows = 0
    with open(args.out, "w", newline="\n") as f:
        f.write("date,open,high,low,close,volume\n")
        for day, o, h, l, c, v in bars(args.seed):
            # Rounded to cents, high and low widened to contain open and close after rounding.
            o, c = round(o, 2), round(c, 2)
            h, l = max(round(h, 2), o, c), min(round(l, 2), o, c)
            f.write(f"{day.isoformat()},{o:.2f},{h:.2f},{l:.2f},{c:.2f},{v}\n")
            rows += 1
    print(f"{args.out}: {rows} bars, {START.isoformat()} .. {END.isoformat()}")


if __name__ == "__main__":
    main()
