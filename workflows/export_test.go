package workflows

// ActivityRefs exposes each ref's name and method expression to the tests.
func ActivityRefs() map[string]any { return refMethods() }

// ChangeTurnStepLazy is the version that keeps fast steps out of the memo.
const ChangeTurnStepLazy = changeTurnStepLazy
