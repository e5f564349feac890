"""TorchServe's PYTHONPATH rule for handlers."""

from sluice_worker.startup import search_paths


def test_model_dir_is_always_on_the_path() -> None:
    assert search_paths("/m", "handler.py") == ["/m"]
    assert search_paths("/m", "handler.py:handle") == ["/m"]
    assert search_paths("/m", "image_classifier") == ["/m"]


def test_a_handler_in_a_subfolder_adds_that_folder_first() -> None:
    assert search_paths("/m", "code/handlers/h.py:fn") == ["/m/code/handlers", "/m"]
