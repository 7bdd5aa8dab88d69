"""The policy with a scalar value head on its last hidden state (shared trunk).

One forward gives both the policy logits and the values, as in Ziegler et al. 2019
(lm-human-preferences uses a separate trunk; we share it to halve the cost on CPU and
keep the value loss weighted by `vf_coef`).
"""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file
from torch import Tensor, nn

from rlhflab.models.forward import response_logits
from rlhflab.models.lm import save_pretrained
from rlhflab.models.lora import CRITIC, active, has_critic, is_adapted, save_adapted
from rlhflab.runs import atomic_dir

VALUE_HEAD_FILE = "value_head.safetensors"


class PolicyWithValue(nn.Module):
    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size
        self.value_head = nn.Linear(hidden, 1)
        # Zero init: the first value estimates are 0, so early advantages are the rewards.
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, prompt_len: int, temperature: float,
        logits_fn=response_logits,
    ) -> tuple[Tensor, Tensor]:
        """Response logits (B, T, V) at `temperature` and values (B, T)."""
        logits, hidden = logits_fn(
            self.lm, input_ids, attention_mask, prompt_len, temperature, output_hidden_states=not has_critic(self.lm)
        )
        if has_critic(self.lm):  # the value head reads the base through its own adapters
            with active(self.lm, CRITIC):
                _, hidden = logits_fn(self.lm, input_ids, attention_mask, prompt_len, temperature,
                                      output_hidden_states=True)
        values = self.value_head(hidden).squeeze(-1)
        return logits, values

    def save(self, out_dir: Path, tokenizer=None, state_dict: dict | None = None) -> None:
        """An HF directory of the LM, with the value head beside it; from `state_dict` (this
        module's full weights, e.g. gathered from FSDP2's shards) when given."""
        state = self.state_dict() if state_dict is None else state_dict
        lm_state = {k.removeprefix("lm."): v for k, v in state.items() if k.startswith("lm.")}
        with atomic_dir(Path(out_dir)) as tmp:
            if is_adapted(self.lm):  # merged HF weights, and the peft adapter in adapter/
                save_adapted(self.lm, lm_state, tmp)
            else:
                save_pretrained(self.lm, tmp, lm_state)
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
            head = {k.removeprefix("value_head."): v.contiguous() for k, v in state.items() if k.startswith("value_head.")}
            save_file(head, str(tmp / VALUE_HEAD_FILE))
