"""The pytest plugin: registered by entry point, fixtures usable by users."""

from __future__ import annotations


def test_plugin_is_registered_and_declares_its_marker(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.toolguard*"])


def test_users_get_a_runtime_with_builtin_tools_on_a_fresh_workspace(pytester):
    pytester.makepyfile(
        """
        from pytest_toolguard import ErrorCode, ToolCall

        def test_env_is_forbidden(toolguard_runtime):
            runtime = toolguard_runtime()
            call = ToolCall(call_id="1", tool_name="read_text", arguments={"path": ".env"})
            result = runtime.execute(call)
            assert result.code is ErrorCode.FORBIDDEN_PATH
            assert runtime.audit.count() == 1
        """
    )
    pytester.runpytest("-p", "no:xdist").assert_outcomes(passed=1)
