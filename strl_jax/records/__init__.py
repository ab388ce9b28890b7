"""What a run leaves behind: metrics.jsonl rows, TensorBoard / W&B / Neptune scalars, console
summaries and the state of the code it ran."""
