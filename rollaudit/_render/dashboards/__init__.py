"""Views of a run step by step, outside the report: the scalars TensorBoard and Weights & Biases chart
(:mod:`.dashboard` names them, :mod:`.tensorboard_events` and :mod:`.wandb_run` write them) and what
``rollaudit watch`` shows (:mod:`.watch`: a line per step, the summary, the live page)."""
