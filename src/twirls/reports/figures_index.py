"""Every figure of the paper (the source has no image files, so none has numbers to compare),
and the curves the paper draws that no stage runs, each with the reason."""

FIGURES: dict[str, str] = {
    "figure2": "Figure 2: Accuracy versus propagation steps on Cora",
    "figure3": "Figure 3 and appendix figure: Amazon co-purchase micro F1 and macro F1",
    "cosine-rho": "Figure 1: rho(z^2) of cosine-distance attention, z^2 - z^4/8",
    "attention-functions": "Appendix figure: rho(z^2) and s(z^2), p = 0.1, tau = 0.2, T = 2",
    "chains": "Appendix figure: Chains, accuracy versus chain length",
    "table8": "Extra figure: Table 8 (alpha x S on Citeseer) drawn as curves",
    "energy-per-step-cora": "Extra figure: energy per propagation step on Cora, with and without "
                            "attention (Lemma 3.3)",
    "architecture": "Appendix figure: model architecture (a diagram, not reproduced)",
}

# figure -> [(curve the paper draws, why no stage runs it)]; the report lists them under its
# figures, so a missing baseline is visible where a reader looks for it.
NOT_BUILT: dict[str, list[tuple[str, str]]] = {
    "figure3": [(
        "SSE",
        "not built: its authors' code (Dai et al., ICML 2018) is C++ on their own graph library, "
        "trained by a stochastic alternating schedule (up to 10^6 iterations of "
        "neighbour-sampled fixed-point updates of a persistent embedding table); a faithful "
        "port is future work, so its curve stays paper-only",
    )],
}
