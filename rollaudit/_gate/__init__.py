"""The CI regression gate: rules (:mod:`.rules`), their configuration (:mod:`.config`), baselines
(:mod:`.baseline`), and :func:`.evaluate.run_gate`, which audits a table and holds every rule against the report."""
