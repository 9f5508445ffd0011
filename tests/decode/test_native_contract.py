"""The native engine against the worker's engine contract, on the scripted checkpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.decode import engine_contract
from tests.decode.engine_contract import Case
from tests.decode.scripted_model import Script, build_scripted_checkpoint
from workers.decode.native.config import EngineConfig
from workers.decode.native.engine import NativeEngine

pytestmark = pytest.mark.asyncio(loop_scope="module")
BLOCK_SIZE = 16


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Script:
    return build_scripted_checkpoint(tmp_path_factory.mktemp("scripted"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def case(script: Script) -> AsyncIterator[Case]:
    engine = NativeEngine(EngineConfig(model=str(script.path), block_size=BLOCK_SIZE, num_blocks=512))
    await engine.start()
    yield Case(engine, script, BLOCK_SIZE)
    await engine.stop()


@pytest.mark.parametrize("check", engine_contract.CHECKS, ids=lambda c: c.__name__)
async def test_contract(case: Case, check) -> None:
    await check(case)
    case.engine.core.check_integrity()  # the engine is idle between checks
