#!/usr/bin/python3
"""Two builds of stformer's bench_stformer side by side: the same cases, the two binaries taking
turns, one table of medians and their ratio (after / before).

usage: bench/compare_builds.py BEFORE_BIN AFTER_BIN REGEX [--rounds 6] [--repetitions 3]

BEFORE_BIN and AFTER_BIN are two bench_stformer binaries (say, a `git worktree` of the commit
before a change, built with the same meson options as the tree with the change). Each round runs
both on the cases whose name matches REGEX (Google Benchmark's --benchmark_filter), --repetitions
times each with random interleaving, the order of the two binaries swapped every round, so that a
machine whose speed drifts over minutes (a shared virtual machine) slows both alike. Prints each
case's median over every round's repetitions for both, and after / before as the median of the
rounds' ratios.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys

UNIT = {'ns': 1e-3, 'us': 1.0, 'ms': 1e3, 's': 1e6}


def run(binary, regex, repetitions):
    """{case: [µs per repetition]} of one run of binary."""
    out = subprocess.run([binary, '--benchmark_filter=' + regex, '--benchmark_repetitions=%d' % repetitions,
                          '--benchmark_enable_random_interleaving=true', '--benchmark_min_time=0.05', '--benchmark_format=json'],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit('%s failed (exit %d): %s' % (binary, out.returncode, out.stderr.strip()[-500:]))
    times = collections.defaultdict(list)
    for b in (json.loads(out.stdout)['benchmarks'] if out.stdout.strip() else []):
        if b.get('run_type') == 'iteration':
            times[b['run_name']].append(b['real_time'] * UNIT[b['time_unit']])
    if not times:
        sys.exit('no case of %s matches %r' % (binary, regex))
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('before')
    p.add_argument('after')
    p.add_argument('regex')
    p.add_argument('--rounds', type=int, default=6)
    p.add_argument('--repetitions', type=int, default=3)
    a = p.parse_args()
    if a.rounds < 1 or a.repetitions < 1:
        sys.exit('--rounds and --repetitions must be at least 1')
    for binary in (a.before, a.after):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            sys.exit('%s is not an executable file (a build\'s bench/bench_stformer)' % binary)
    binaries = (a.before, a.after)  # side 0 and side 1
    every = (collections.defaultdict(list), collections.defaultdict(list))
    ratios = collections.defaultdict(list)
    for r in range(a.rounds):
        got = [None, None]
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            got[side] = run(binaries[side], a.regex, a.repetitions)
            for case, t in got[side].items():
                every[side][case] += t
        for case in got[0].keys() & got[1].keys():
            ratios[case].append(statistics.median(got[1][case]) / statistics.median(got[0][case]))
        print('round %d of %d done' % (r + 1, a.rounds), file=sys.stderr)
    print('| case | before (µs) | after (µs) | after / before |')
    print('|---|---|---|---|')
    for case in sorted(ratios):
        print('| %s | %.4g | %.4g | %.3f |' % (case, statistics.median(every[0][case]), statistics.median(every[1][case]),
                                             statistics.median(ratios[case])))


if __name__ == '__main__':
    main()
