"""Role workers: the actor / rollout / reference, critic and reward-model workers the trainer drives, each wiring its
role to a training engine chosen by the role's ``strategy``."""
