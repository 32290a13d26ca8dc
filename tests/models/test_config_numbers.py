"""The families' config numbers that are not sizes (initialisation scales, regularisation weights): a
NaN, an infinity, a negative value or a null in config.json is a one-line error naming the field
(found by the fuzz tier: initializer_range null or negative reached torch's init with a traceback)."""

import math

import pytest

from bertology.errors import UserError
from bertology.models.awd_lstm import AWDLSTMConfig
from bertology.models.gpt import GPTConfig
from bertology.models.t5 import T5Config
from bertology.models.xlnet import XLNetConfig

CASES = [(GPTConfig, "initializer_range"), (GPTConfig, "lm_coef"), (T5Config, "initializer_factor"),
         (XLNetConfig, "initializer_range"), (AWDLSTMConfig, "init_range"), (AWDLSTMConfig, "ar_alpha"),
         (AWDLSTMConfig, "tar_beta")]


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -1.0, -(2**63) - 1])
@pytest.mark.parametrize("config_class, name", CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
def test_a_scale_that_is_not_a_finite_non_negative_number_is_refused(config_class, name, value):
    with pytest.raises(UserError, match=rf"^config field '{name}' must be a finite number >= 0, got "):
        config_class(**{name: value})
