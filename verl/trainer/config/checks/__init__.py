"""Driver-side config checks, run before Ray starts; every problem is a `ConfigError` naming the key and the value.

They look at the registries of every layer (advantage estimators, policy losses, tool parsers, agent loops,
tracking backends), so they sit above the config sections and nothing below the trainer imports them. One module
per concern: `ppo` (the whole `ppo_trainer` config: `check_ppo_config`, `resolve_device_name`), `runtime_support`
(settings the workers cannot honour yet), `unsupported_keys` (verl's keys whose runtime is not here: refused when
changed), `data` (the data files: parquet, rows, the columns the run reads),
`multi_turn` (tools, interactions, agent loops), `rollout_correction` (`algorithm.rollout_correction`), `vlm` (a
vision-language policy), `generation` and `evaluation` (the configs of `main_generation` and `main_eval`).
"""
