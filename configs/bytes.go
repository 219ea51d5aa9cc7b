package configs

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bytes is a size in bytes, written in YAML as a plain number or with a
// binary unit: 512KiB, 64MiB, 1GiB (KB, MB and GB mean the same here).
type Bytes int64

var byteUnits = []struct {
	suffix string
	size   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1},
}

// UnmarshalYAML reads a number of bytes with an optional unit.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.size
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return fmt.Errorf("line %d: %q is not a size (a number of bytes, or with KiB, MiB or GiB)", n.Line, n.Value)
	}
	*b = Bytes(v * mult)
	return nil
}

// String writes the size with the largest unit that divides it.
func (b Bytes) String() string {
	for _, u := range byteUnits[:3] {
		if int64(b) >= u.size && int64(b)%u.size == 0 {
			return strconv.FormatInt(int64(b)/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10) + " bytes"
}
