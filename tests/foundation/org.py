"""A small valid organisation as plain data, for tests to mutate one field at a time."""

import copy

import yaml

from constructs_lib.loader import default_config_text


def default_data() -> dict:
    return copy.deepcopy(yaml.safe_load(default_config_text()))
