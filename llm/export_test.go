package llm

// TakeLoopbackForRemote makes every server URL count as remote until the
// returned function is called: the tests' servers all listen on loopback,
// and the retries of a refused connection apply to remote servers only.
func TakeLoopbackForRemote() (restore func()) {
	old := isLoopback
	isLoopback = func(string) bool { return false }
	return func() { isLoopback = old }
}
