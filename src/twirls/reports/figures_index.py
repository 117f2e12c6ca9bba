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
# figures, so a missing baseline is visible where a reader looks for it. Every curve the paper
# draws is run now (SSE, the last one, is twirls.models.baselines.sse).
NOT_BUILT: dict[str, list[tuple[str, str]]] = {}
