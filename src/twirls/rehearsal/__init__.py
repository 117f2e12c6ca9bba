"""Full-size rehearsal of the stages whose datasets are not in the offline mirror.

Pubmed, ogbn-arxiv, Amazon and the PKU training text cannot be fetched here, so their stages
have never run at their real size. The rehearsal generates files in the real formats at the
paper's Table 5 sizes and runs every stage that reads them through the real stage code with a
tiny budget, recording the cost per epoch, peak memory and the extrapolated cost of the real run::

    make rehearsal                      # = python -m twirls.rehearsal.run
    python -m twirls.rehearsal.run --only arxiv --budgets 1,2
    python -m twirls.rehearsal.generate OUT_DIR [--scale 0.01]   # the files alone

Output: ``reports/benchmarks/rehearsal.json``. The data is synthetic: no stage output of the
rehearsal ever reaches ``reports/tables`` or ``reports/results.csv``.

Modules: :mod:`.sizes` (target sizes and their sources), :mod:`.generate` (the files),
:mod:`.graphs` / :mod:`.textio` / :mod:`.py2pickle` (its helpers), :mod:`.plan` (stages and
their budget params), :mod:`.measure` (wall time, peak RSS, GPU memory of one run),
:mod:`.estimate` (seconds per epoch, extrapolation), :mod:`.run` (the command).
"""
