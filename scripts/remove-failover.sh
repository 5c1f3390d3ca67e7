#!/bin/bash
exec /usr/bin/ipfailover remove-failover "$@"
