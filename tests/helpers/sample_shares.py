"""Run under torchrun by tests/test_multiprocess.py: sample a batch of world prompts in
shares over however many processes torchrun started, gather it, and (first process)
save the whole batch's response ids and masks.

    torchrun --nproc_per_node=N tests/helpers/sample_shares.py MODEL_DIR OUT.pt [PROMPTS]
"""

import sys

import torch

from rlhflab.distributed import Cluster
from rlhflab.models.lm import load_causal_lm, load_tokenizer
from rlhflab.models.sampling import sample_responses, sample_share
from rlhflab.seeding import RowStreams
from rlhflab.worlds.reviews import ReviewsWorld


def main() -> None:
    model_dir, out = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    cluster = Cluster.from_environment()
    torch.set_num_threads(1)
    lm, tokenizer = load_causal_lm(model_dir).eval(), load_tokenizer(model_dir)
    prompts = ReviewsWorld().prompts(n, 7)
    share = sample_share(sample_responses, lm, tokenizer, prompts, 32, 1.0,
                         RowStreams(0, ("test", "shares"), list(range(n))), cluster)
    ids = cluster.gather_rows(share.samples.response_ids, n)
    mask = cluster.gather_rows(share.samples.mask, n)
    if cluster.is_main:
        torch.save({"ids": ids, "mask": mask}, out)
    cluster.barrier()


if __name__ == "__main__":
    main()
