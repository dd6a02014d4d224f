"""Sequencer process: ring wiring around `services.sequencer.logic.Sequencer`."""

from __future__ import annotations

import time

from fastapi import FastAPI

from services.sequencer.logic import Sequencer
from weaseldb.config import Config
from weaseldb.protocol import RingEntry
from weaseldb.relay import RelayStage
from weaseldb.ring import Endpoints, Ring
from weaseldb.service import Health, stage_app


def build(config: Config, ring: Ring) -> tuple[RelayStage, FastAPI]:
    endpoints = Endpoints(config)
    sequencer = Sequencer(config.sequencer.request_id_memory)
    health = Health(reason="waiting for a term")

    def process(entries: list[RingEntry]) -> list[RingEntry]:
        forward = sequencer.sequence(entries, int(time.time() * 1000))
        if sequencer.leading and not health.ready:
            health.set(True, "leading")
        health.details["last_assigned_version"] = sequencer.last_assigned
        return forward

    stage = RelayStage(
        "sequencer",
        ring.inbox(endpoints.sequencer),
        ring.outbox(endpoints.resolver),
        process,
        shutdowns_expected=config.gateway.workers,
        drain_timeout_s=config.drain_timeout_s,
        health=health,
    )
    return stage, stage_app("sequencer", health)
