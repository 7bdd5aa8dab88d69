"""The doctor inside other trainers: `DoctorCallback` for every transformers/TRL trainer."""

from rlhflab.integrations.transformers_callback import DoctorCallback, DoctorStop

__all__ = ["DoctorCallback", "DoctorStop"]
