"""Setting a group's configs (KIP-848/932 group configs, e.g. `share.auto.offset.reset`) in tests, through
confluent-kafka's IncrementalAlterConfigs on a GROUP resource, as Kafka's kafka-configs --entity-type groups."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """SET each of `configs` on `group` and wait (30 s at most) for the broker's answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)
