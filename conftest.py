# The pytest glue lives in fixtures/; registered in dependency order.
pytest_plugins = ["fixtures.machine", "fixtures.safety", "fixtures.options", "fixtures.ab_sides", "fixtures.parametrize",
                  "fixtures.gate", "fixtures.running", "fixtures.progress", "fixtures.plugin"]
