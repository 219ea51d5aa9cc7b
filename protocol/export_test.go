package protocol

// HoldCreators takes every creator of c, as maxCreating creations in
// flight would; release gives them back.
func HoldCreators(c *Caller) (release func()) {
	for range maxCreating {
		c.creators <- struct{}{}
	}
	return func() {
		for range maxCreating {
			<-c.creators
		}
	}
}
