"""The model card template `aiayn.hub` renders into hub folders; installed as the package `aiayn.hub_card`."""
