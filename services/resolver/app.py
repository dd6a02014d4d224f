"""Resolver process: ring wiring around `services.resolver.logic.Resolver`."""

from __future__ import annotations

from fastapi import FastAPI

from services.resolver.logic import Resolver, Window
from weaseldb.config import Config
from weaseldb.protocol import RingEntry, TermStart
from weaseldb.relay import RelayStage
from weaseldb.ring import Endpoints, Ring
from weaseldb.service import Health, stage_app


def build(config: Config, ring: Ring) -> tuple[RelayStage, FastAPI]:
    endpoints = Endpoints(config)
    resolver = Resolver(Window(config.resolver.window_seconds, config.resolver.window_versions))
    health = Health(reason="waiting for a term")

    def process(entries: list[RingEntry]) -> list[RingEntry]:
        resolver.resolve(entries)
        if not health.ready and any(isinstance(e, TermStart) for e in entries):
            health.set(True, "leading")
        return entries

    stage = RelayStage(
        "resolver",
        ring.inbox(endpoints.resolver),
        ring.outbox(endpoints.persister),
        process,
        shutdowns_expected=1,
        drain_timeout_s=config.drain_timeout_s,
        health=health,
    )
    return stage, stage_app("resolver", health)
