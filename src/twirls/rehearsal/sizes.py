"""The real sizes the rehearsal files are generated at, with their sources.

Nodes, edges, features and classes of Pubmed, ogbn-arxiv and Amazon are the paper's Table 5
(``src/twirls/reports/paper_numbers.csv``, table ``table5``); edges are generated as
that many distinct undirected edges, which is what ``GraphData.num_undirected_edges`` (and the
``datasets`` stage) counts. The rest:

* Pubmed: 18,717 ``allx`` rows + 1,000 test rows, 20 training nodes per class, and TF-IDF
  density 988,031 / (19,717 x 500) = 10.02% non-zeros, the non-zeros of the real
  ``ind.pubmed.allx`` + ``tx`` (``shared/datasets/README.md``: 937,891 + 50,140). This density
  matters: models that accept sparse input get CSR features only below 10%
  (``twirls.train.experiment.SPARSE_BELOW``), so real Pubmed runs dense, and so does ours.
* ogbn-arxiv: OGB's time split, 90,941 / 29,799 / 48,603 papers (<= 2017 / 2018 / >= 2019).
* Amazon: IGNN's ``amazon-all``: 10% of the nodes as test set, training sets of 5%..9% of the
  nodes (the paper's label ratios).
* PKU: SIGHAN 2005 (Emerson 2005, Table 1): 1,109,947 training words in about 19,056
  sentences; the test gold has 1,944 sentences and 104,372 words (counted from
  ``pku_test_gold.utf8``), and its word lengths (1: 45.5%, 2: 47.0%, 3: 4.9%, 4+: 2.6%) are
  used for both files; about 4,700 distinct characters. fastNLP's ``cn-char-fastnlp-100d``
  (Table 12's paper protocol): 100-d vectors; its real vocabulary size is not recorded in this
  repository, so the synthetic file holds one vector per character the generated text can
  contain (those 4,700).
"""

from __future__ import annotations

PUBMED = {"nodes": 19_717, "edges": 44_339, "features": 500, "classes": 3, "test": 1_000,
          "train_per_class": 20, "val": 500, "density": 988_031 / (19_717 * 500)}
ARXIV = {"nodes": 169_343, "edges": 1_166_243, "features": 128, "classes": 40,
         "train": 90_941, "valid": 29_799, "test": 48_603}
AMAZON = {"nodes": 334_863, "edges": 2_186_607, "features": 0, "classes": 58,
          "test_fraction": 0.1, "ratios": ("0.05", "0.06", "0.07", "0.08", "0.09")}
PKU = {"train_sentences": 19_056, "train_words": 1_109_947, "test_sentences": 1_944,
       "test_words": 104_372, "characters": 4_700,
       # word lengths 1..9 of pku_test_gold.utf8 (counts; longer words are negligible)
       "word_lengths": (47_490, 49_058, 5_117, 2_013, 579, 69, 28, 9, 2)}

#: dataset name (as in params.yaml) -> sizes
SIZES = {"pubmed": PUBMED, "ogbn-arxiv": ARXIV, "amazon": AMAZON, "pku": PKU}
