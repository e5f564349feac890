from sluice_manager.supervision.gpus import gpu_ids, parse_indexes


def test_nvidia_smi_index_lines() -> None:
    assert parse_indexes("0\n1\n 2 \n\n") == (0, 1, 2)
    assert parse_indexes("") == ()
    assert parse_indexes("No devices were found\n") == ()


def test_number_of_gpu_caps_what_is_visible() -> None:
    assert gpu_ids(None, (0, 1, 2)) == (0, 1, 2)
    assert gpu_ids(2, (0, 1, 2)) == (0, 1)
    assert gpu_ids(0, (0, 1)) == ()
    assert gpu_ids(4, (0,)) == (0,)
