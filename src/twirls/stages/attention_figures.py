"""Stage ``attention-figures``: the paper's plots of attention functions.

* ``reports/figures/attention-functions.png``: ρ(z²) and s(z²) of the truncated ℓp penalty
  (appendix "Specific Attention Formula", Fig. "A visualization of attention functions") with the
  params ``attention.p``, ``attention.tau``, ``attention.T`` (paper: p = 0.1, τ = 0.2, T = 2).
* ``reports/figures/cosine-rho.png``: ρ(z²) = z² − z⁴/8 of cosine attention (section 3.4).

The curves come from :class:`twirls.models.attention.TruncatedLp`, the code the models run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from twirls.models.attention import AttentionSpec, cosine_rho  # noqa: E402
from twirls.params import load_params  # noqa: E402
from twirls.reports.figure_file import save_figure  # noqa: E402
from twirls.stages.cli import entry  # noqa: E402


@entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("reports/figures"))
    args = parser.parse_args(argv)
    spec = AttentionSpec.from_config(load_params("attention-figures")["attention"])
    rho = spec.rho

    t_bar = rho.T_bar if rho.T_bar < 1e6 else 2 * rho.tau_bar + 2
    z = torch.linspace(0, 1.25 * t_bar, 2001, dtype=torch.float64)
    z2 = z**2
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(5, 6), sharex=True)
    ax1.plot(z2, rho.rho(z2), color="C0")
    ax1.set_ylabel(r"$\rho(z^2)$")
    ax2.plot(z2, rho.score(z2), color="C1")
    ax2.set_ylabel(r"$s(z^2)$")
    ax2.set_xlabel(r"$z^2$")
    for ax in (ax1, ax2):
        for thr, name in ((rho.tau_bar, r"$\bar\tau^2$"), (rho.T_bar, r"$\bar T^2$")):
            if thr < 1e6:
                ax.axvline(thr**2, ls=":", color="grey")
                ax.annotate(name, (thr**2, ax.get_ylim()[1]), fontsize=8, ha="center",
                            va="bottom")
    fig.suptitle(f"truncated $\\ell_p$ attention: p={rho.p:g}, τ={rho.tau:g}, T={rho.T:g}")
    save_figure(fig, args.out / "attention-functions.png")

    z2 = torch.linspace(0, 4, 401, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(z2, cosine_rho(z2))
    ax.set_xlabel(r"$z^2$")
    ax.set_ylabel(r"$\rho(z^2) = z^2 - z^4/8$")
    ax.set_title("cosine-distance attention")
    save_figure(fig, args.out / "cosine-rho.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
