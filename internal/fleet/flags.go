package fleet

import (
	"flag"
	"fmt"
	"strings"
)

// PrintFlagDefaults is flag.PrintDefaults with the double-dash spelling the
// tools' docs use, shared by xds-democp and xds-loadgen.
func PrintFlagDefaults(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(fs.Output(), line)
	})
}
