package workflows

// ActivityRefs exposes each ref's name and method expression to the tests.
func ActivityRefs() map[string]any { return refMethods() }
