package bench

import (
	"fmt"
	"net/netip"

	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// BestBackup returns, among the nodes' configurations other than the
// holder's, the highest priority for vip's instance: the node that takes
// vip over first. Equal priorities tie; the value is what matters.
func BestBackup(confs map[string]*keepalived.Conf, holder string, vip netip.Addr) (node string, prio int, conf *keepalived.Conf, err error) {
	for name, c := range confs {
		if name == holder {
			continue
		}
		in := c.InstanceOf(vip)
		if in == nil {
			return "", 0, nil, fmt.Errorf("%s: no instance for %s", name, vip)
		}
		if in.Priority > prio || (in.Priority == prio && name > node) {
			node, prio, conf = name, in.Priority, c
		}
	}
	if conf == nil {
		return "", 0, nil, fmt.Errorf("no backup for %s besides %s", vip, holder)
	}
	return node, prio, conf, nil
}
