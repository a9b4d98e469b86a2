"""``python -m verl.model_merger {merge,test} --backend fsdp --local_dir ...``."""

from verl.model_merger import main

if __name__ == "__main__":
    main()
