"""The synthetic TREC collection of ``experiments/trec_agreement.py`` (every case trec_eval's conventions decide:
ties, judged documents the run misses, unjudged documents, queries without relevant documents, run queries without
qrels), for the tests: one generator for the experiment and the tests."""
import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "experiments" / "trec_agreement.py"
_spec = importlib.util.spec_from_file_location("_trec_agreement_for_tests", _PATH)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

NAMES, TREC_MEASURES, synthetic_collection, write_trec = (_mod.NAMES, _mod.TREC_MEASURES, _mod.synthetic_collection,
                                                          _mod.write_trec)
