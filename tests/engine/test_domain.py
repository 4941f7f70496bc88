"""Domain and Dataset: construction validation and accessors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.domain import Dataset, Domain


def test_domain_accessors() -> None:
    domain = Domain.from_mapping({"sex": 2, "age": 5, "region": 3})
    assert domain.attributes == ("sex", "age", "region")
    assert domain.sizes == (2, 5, 3)
    assert len(domain) == 3
    assert "age" in domain
    assert "income" not in domain
    assert domain.size("age") == 5
    assert domain.index("region") == 2
    assert domain.as_dict() == {"sex": 2, "age": 5, "region": 3}
    assert list(domain.as_dict()) == ["sex", "age", "region"]
    assert domain.cells() == 30
    assert domain.cells(["region", "sex"]) == 6
    assert domain.cells([]) == 1
    assert domain.project(["region", "sex"]) == Domain(("region", "sex"), (3, 2))


def test_cells_is_an_exact_python_int() -> None:
    domain = Domain.from_mapping({f"a{i}": 1000 for i in range(10)})
    assert domain.cells() == 1000**10
    assert isinstance(domain.cells(), int)


def test_domain_is_frozen_and_hashable() -> None:
    domain = Domain.from_mapping({"a": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        domain.sizes = (3,)  # type: ignore[misc]
    assert hash(domain) == hash(Domain(("a",), (2,)))


def test_domain_normalises_numpy_sizes() -> None:
    domain = Domain(("a",), (np.int64(4),))  # type: ignore[arg-type]
    assert type(domain.sizes[0]) is int


@pytest.mark.parametrize(
    ("attributes", "sizes"),
    [
        ((), ()),
        (("a", "b"), (2,)),
        (("a",), (2, 3)),
        (("a", "a"), (2, 3)),
        (("",), (2,)),
        (("a",), (0,)),
        (("a",), (-1,)),
        (("a",), (2.0,)),
        (("a",), (True,)),
        ((1,), (2,)),
    ],
)
def test_domain_rejects_invalid(attributes: tuple[object, ...], sizes: tuple[object, ...]) -> None:
    with pytest.raises(ValueError):
        Domain(attributes, sizes)  # type: ignore[arg-type]


def test_domain_lookups_of_unknown_attributes() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    with pytest.raises(KeyError):
        domain.size("c")
    with pytest.raises(KeyError):
        domain.index("c")
    with pytest.raises(KeyError):
        domain.project(["a", "c"])
    with pytest.raises(ValueError):
        domain.project(["a", "a"])
    with pytest.raises(TypeError):
        domain.project("a")


def test_dataset_valid_and_read_only() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    codes = np.array([[0, 2], [1, 0], [1, 1]], dtype=np.int32)
    data = Dataset(domain, codes)
    assert data.n_rows == 3
    np.testing.assert_array_equal(data.column("b"), [2, 0, 1])
    assert not data.codes.flags.writeable
    with pytest.raises(ValueError):
        data.codes[0, 0] = 1
    # The caller's array stays writeable and changing it does not change the dataset.
    codes[0, 0] = 1
    assert data.codes[0, 0] == 0


def test_dataset_keeps_read_only_input_without_copy() -> None:
    domain = Domain.from_mapping({"a": 2})
    codes = np.array([[0], [1]])
    codes.flags.writeable = False
    assert np.shares_memory(Dataset(domain, codes).codes, codes)


def test_dataset_allows_zero_rows() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    data = Dataset(domain, np.empty((0, 2), dtype=np.int64))
    assert data.n_rows == 0
    assert data.column("a").shape == (0,)


@pytest.mark.parametrize(
    "codes",
    [
        np.array([0, 1]),  # 1-D
        np.zeros((2, 2, 1), dtype=np.int64),  # 3-D
        np.array([[0.0, 1.0]]),  # float
        np.array([[True, False]]),  # bool
        np.array([[0, 1, 0]]),  # too many columns
        np.array([[0]]),  # too few columns
        np.array([[2, 0]]),  # code == size
        np.array([[0, -1]]),  # negative
        np.array([[0, 3]]),  # out of range in the second column
    ],
)
def test_dataset_rejects_invalid_codes(codes: np.ndarray) -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    with pytest.raises(ValueError):
        Dataset(domain, codes)


def test_dataset_error_does_not_echo_codes() -> None:
    domain = Domain.from_mapping({"salary": 3})
    with pytest.raises(ValueError) as error:
        Dataset(domain, np.array([[987654]]))
    assert "987654" not in str(error.value)


def test_dataset_rejects_non_domain() -> None:
    with pytest.raises(TypeError):
        Dataset({"a": 2}, np.zeros((1, 1), dtype=np.int64))  # type: ignore[arg-type]
