// Command floor is the floor of mm's start-up benchmarks: a bare Go process
// that answers an initialize line as mm -acp would, with nothing else
// linked, then waits for its stdin to close. What mm takes beyond it is
// mm's own.
package main

import (
	"bufio"
	"os"
)

func main() {
	r := bufio.NewReader(os.Stdin)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		if len(line) > 1 {
			os.Stdout.WriteString(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}` + "\n")
		}
	}
}
