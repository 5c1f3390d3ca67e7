package config

// OnPremRouterIDs returns the virtual_router_ids an OpenShift on-prem IPI
// cluster of that name uses for its API and Ingress VIPs, so they can go
// into HA_EXCLUDED_VRRP_IDS. The cluster derives them from a Fletcher-8
// checksum of "<name>-api" and "<name>-ingress", plus one; the Ingress id
// moves up while it equals the API id.
func OnPremRouterIDs(cluster string) (api, ingress RouterID) {
	api = RouterID(fletcher8(cluster+"-api")) + 1
	ingress = RouterID(fletcher8(cluster+"-ingress")) + 1
	for ingress == api {
		ingress++
	}
	return api, ingress
}

// fletcher8 runs two sums modulo 15 over the bytes and packs them in a
// byte: the second sum in the high nibble.
func fletcher8(s string) uint8 {
	var a, b uint8
	for i := 0; i < len(s); i++ {
		a = uint8((uint16(a) + uint16(s[i])) % 15)
		b = (b + a) % 15
	}
	return b<<4 | a
}
