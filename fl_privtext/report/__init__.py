"""The report stage: a served point's results.json, its console table and warnings (`results`), the run's plots
(`plots`) and the experiment trackers (`tracking`)."""

from fl_privtext.report.results import (
    POPULATION_DOC,
    SCHEMA_VERSION,
    aggregate,
    attack_lines,
    baseline_summary,
    finalize,
    prior_baseline,
    provenance,
    table,
    warnings_for,
)

__all__ = ["POPULATION_DOC", "SCHEMA_VERSION", "aggregate", "attack_lines", "baseline_summary", "finalize",
           "prior_baseline", "provenance", "table", "warnings_for"]
