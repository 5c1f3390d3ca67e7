package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnknownVariables(t *testing.T) {
	got := UnknownVariables([]string{"OPENSHIFT_HA_VIRTUAL_IP=1.2.3.4", "OPENSHIFT_HA_VIRTUAL_IPS=1.2.3.4", "PATH=/bin", "OPENSHIFT_HA_SOMETHING_ELSE_ENTIRELY=1"})
	want := []string{"OPENSHIFT_HA_VIRTUAL_IP (did you mean OPENSHIFT_HA_VIRTUAL_IPS?)", "OPENSHIFT_HA_SOMETHING_ELSE_ENTIRELY"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnknownVariables (-want +got):\n%s", diff)
	}
}
