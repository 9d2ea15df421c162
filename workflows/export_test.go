package workflows

// ActivityRefs exposes each ref's name and method expression to the tests.
func ActivityRefs() map[string]any {
	return map[string]any{
		beginTurn.name: beginTurn.method, callProvider.name: callProvider.method,
		callMCPTool.name: callMCPTool.method, execSandbox.name: execSandbox.method,
		runSubagentTool.name: runSubagentTool.method, finishIteration.name: finishIteration.method,
		runSubagent.name: runSubagent.method, failTurnAct.name: failTurnAct.method,
		cleanupSession.name: cleanupSession.method,
	}
}
