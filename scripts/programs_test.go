package scripts

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// This file finds the programs the module's Go code executes, without
// running it: a small data-flow reading of the syntax, enough for the ways
// this code starts programs.
//
// Execution sites: exec.Command, exec.CommandContext, exec.LookPath,
// os.StartProcess, syscall.Exec and unix.Exec. The program of a site is its
// first argument, followed back through constants, local variables, range
// loops over literal lists, slices built with []string{...} and append, and
// functions of the same package that return them.
//
// Wrappers: a function whose parameter reaches the program position (lab's
// run and execOut take an argv, Node.Exec appends its argv to an nsenter
// prefix) is a wrapper, and its callers' arguments are read the same way,
// to any depth.
//
// Launchers are seen through: `nsenter ... -- PROG`, `ip netns exec NS
// PROG`, `sh -c SCRIPT` (each command of SCRIPT, and the arguments after
// $0 when SCRIPT runs "$@"). String literals naming /bin, /sbin, /usr/bin
// or /usr/sbin programs count too: they are what keepalived's check
// scripts run.
//
// What the reading cannot name (a field holding a path, a binary a test
// built) is reported as unresolved, for the caller to account for.

// valueKind says what one possible value of an argv position is.
type valueKind int

const (
	litValue     valueKind = iota // a known string
	paramValue                    // the enclosing function's string parameter
	restValue                     // the rest of the argv is the enclosing function's parameter
	unknownValue                  // something the reading cannot follow
)

type value struct {
	kind  valueKind
	s     string // litValue: the string; unknownValue: the expression's source
	param int    // paramValue, restValue: the parameter's index
}

// alts are the possible values of one argv position; a shape is one
// possible argv.
type (
	alts  []value
	shape []alts
)

// maxShapes bounds how many argv shapes one expression may have.
const maxShapes = 256

// Site is one place in the code that executes something.
type Site struct {
	Pos  string // file:line, relative to the module root
	File string
}

// Scan is what the reading found.
type Scan struct {
	// Programs maps each program name to the places that run it.
	Programs map[string][]Site
	// Unresolved maps "file: expression" to the places that execute an
	// expression the reading cannot name.
	Unresolved map[string][]Site
	// Wrappers lists the functions found to pass an argv through, for the
	// test's sanity checks.
	Wrappers []string
}

type goPackage struct {
	dir     string // relative to the module root
	name    string // package name (foo and foo_test share a directory)
	files   []*goFile
	funcs   map[string][]*ast.FuncDecl // plain functions by name
	methods map[string][]*ast.FuncDecl // methods by name
	values  map[string]ast.Expr        // package-level constants and variables
}

type goFile struct {
	pkg     *goPackage
	path    string
	ast     *ast.File
	imports map[string]string // local name -> import path
}

// wrapper is a function whose argument at param becomes an argv: a slice
// parameter (slice), or the arguments from param on (a string or variadic
// parameter).
type wrapper struct {
	param int
	slice bool
}

type scanner struct {
	root     string
	module   string
	fset     *token.FileSet
	pkgs     map[string]*goPackage // by "DIR NAME"
	wrappers map[string]wrapper    // "func DIR NAME.FUNC" or "method DIR NAME.METHOD"
	out      *Scan
	changed  bool
}

// scanModule reads every Go file under root (testdata included, vendor and
// hidden directories not) of the module with the given path.
func scanModule(root, module string) (*Scan, error) {
	s := &scanner{
		root: root, module: module, fset: token.NewFileSet(),
		pkgs: map[string]*goPackage{}, wrappers: map[string]wrapper{},
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		return s.parse(p)
	})
	if err != nil {
		return nil, err
	}
	// Wrappers found in one round make their callers sites in the next;
	// stop when a round finds no new wrapper.
	for round := 0; ; round++ {
		if round > 20 {
			return nil, fmt.Errorf("wrappers still changing after %d rounds", round)
		}
		s.changed = false
		s.out = &Scan{Programs: map[string][]Site{}, Unresolved: map[string][]Site{}}
		for _, dir := range sortedKeys(s.pkgs) {
			for _, f := range s.pkgs[dir].files {
				s.scanFile(f)
			}
		}
		if !s.changed {
			break
		}
	}
	s.out.Wrappers = sortedKeys(s.wrappers)
	return s.out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *scanner) parse(p string) error {
	f, err := parser.ParseFile(s.fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(s.root, p)
	if err != nil {
		return err
	}
	dir := filepath.ToSlash(filepath.Dir(rel))
	key := dir + " " + f.Name.Name
	pkg := s.pkgs[key]
	if pkg == nil {
		pkg = &goPackage{dir: dir, name: f.Name.Name, funcs: map[string][]*ast.FuncDecl{},
			methods: map[string][]*ast.FuncDecl{}, values: map[string]ast.Expr{}}
		s.pkgs[key] = pkg
	}
	gf := &goFile{pkg: pkg, path: filepath.ToSlash(rel), ast: f, imports: map[string]string{}}
	for _, im := range f.Imports {
		ip, _ := strconv.Unquote(im.Path.Value)
		name := path.Base(ip)
		if im.Name != nil {
			name = im.Name.Name
		}
		gf.imports[name] = ip
	}
	pkg.files = append(pkg.files, gf)
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil {
				pkg.methods[d.Name.Name] = append(pkg.methods[d.Name.Name], d)
			} else {
				pkg.funcs[d.Name.Name] = append(pkg.funcs[d.Name.Name], d)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						pkg.values[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	return nil
}

// fnCtx is one function being read: its parameters and every assignment
// in its body, by name (closures included; scopes are not told apart).
type fnCtx struct {
	s       *scanner
	file    *goFile
	decl    *ast.FuncDecl // nil at package level
	key     string        // wrapper key of decl
	params  map[string]int
	slices  map[string]bool // parameters holding an argv ([]string or ...string)
	assigns map[string][]ast.Expr
	ranges  map[string][]ast.Expr // range value variables -> the ranged expressions
	// rangeKeys: range key variables -> the ranged expressions (maps).
	rangeKeys map[string][]ast.Expr
	visit     map[ast.Node]bool // recursion guard
}

func (s *scanner) newCtx(f *goFile, decl *ast.FuncDecl) *fnCtx {
	c := &fnCtx{s: s, file: f, decl: decl, params: map[string]int{}, slices: map[string]bool{},
		assigns: map[string][]ast.Expr{}, ranges: map[string][]ast.Expr{}, rangeKeys: map[string][]ast.Expr{},
		visit: map[ast.Node]bool{}}
	if decl == nil {
		return c
	}
	c.key = funcKey(f.pkg, decl)
	i := 0
	for _, field := range decl.Type.Params.List {
		argv := false
		switch t := field.Type.(type) {
		case *ast.Ellipsis:
			argv = isIdent(t.Elt, "string")
		case *ast.ArrayType:
			argv = t.Len == nil && isIdent(t.Elt, "string")
		}
		names := field.Names
		if len(names) == 0 {
			i++
			continue
		}
		for _, n := range names {
			c.params[n.Name] = i
			c.slices[n.Name] = argv
			i++
		}
	}
	if decl.Body == nil {
		return c
	}
	ast.Inspect(decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			switch {
			case len(n.Lhs) == len(n.Rhs):
				for i, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						c.assigns[id.Name] = append(c.assigns[id.Name], n.Rhs[i])
					}
				}
			case len(n.Rhs) == 1:
				// p, err := exec.LookPath("x"): the first result.
				if id, ok := n.Lhs[0].(*ast.Ident); ok {
					c.assigns[id.Name] = append(c.assigns[id.Name], n.Rhs[0])
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if i < len(n.Values) {
					c.assigns[id.Name] = append(c.assigns[id.Name], n.Values[i])
				}
			}
		case *ast.RangeStmt:
			if id, ok := n.Value.(*ast.Ident); ok {
				c.ranges[id.Name] = append(c.ranges[id.Name], n.X)
			}
			if id, ok := n.Key.(*ast.Ident); ok {
				c.rangeKeys[id.Name] = append(c.rangeKeys[id.Name], n.X)
			}
		}
		return true
	})
	return c
}

func funcKey(p *goPackage, d *ast.FuncDecl) string {
	if d.Recv != nil {
		return "method " + p.dir + " " + p.name + "." + d.Name.Name
	}
	return "func " + p.dir + " " + p.name + "." + d.Name.Name
}

// imported returns the module's package at import path ip, or nil.
func (s *scanner) imported(ip string) *goPackage {
	dir, ok := strings.CutPrefix(ip, s.module+"/")
	if !ok {
		return nil
	}
	for _, p := range s.pkgs {
		if p.dir == dir && !strings.HasSuffix(p.name, "_test") {
			return p
		}
	}
	return nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func (s *scanner) scanFile(f *goFile) {
	pkgCtx := s.newCtx(f, nil)
	for _, d := range f.ast.Decls {
		c := pkgCtx
		if fd, ok := d.(*ast.FuncDecl); ok {
			c = s.newCtx(f, fd)
		}
		ast.Inspect(d, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				c.call(n)
			case *ast.BasicLit:
				c.pathLiteral(n)
			}
			return true
		})
	}
}

// site records where n is.
func (c *fnCtx) site(n ast.Node) Site {
	p := c.s.fset.Position(n.Pos())
	return Site{Pos: fmt.Sprintf("%s:%d", c.file.path, p.Line), File: c.file.path}
}

func (c *fnCtx) src(e ast.Expr) string {
	start, end := c.s.fset.Position(e.Pos()), c.s.fset.Position(e.End())
	if start.Line != end.Line {
		return fmt.Sprintf("%T", e)
	}
	var b strings.Builder
	writeExpr(&b, e)
	return b.String()
}

// binDirs are the directories whose programs a path literal names.
var binDirs = []string{"/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/", "/usr/local/sbin/"}

// pathLiteral records a string literal that starts with a program's path,
// such as keepalived's check command "/bin/true".
func (c *fnCtx) pathLiteral(l *ast.BasicLit) {
	if l.Kind != token.STRING {
		return
	}
	v, err := strconv.Unquote(l.Value)
	if err != nil {
		return
	}
	first, _, _ := strings.Cut(v, " ")
	for _, d := range binDirs {
		if rest, ok := strings.CutPrefix(first, d); ok && rest != "" && !strings.Contains(rest, "/") && !strings.ContainsAny(rest, "*%{}$") {
			c.record(rest, l)
		}
	}
}

func (c *fnCtx) record(prog string, at ast.Node) {
	prog = path.Base(prog)
	c.s.out.Programs[prog] = append(c.s.out.Programs[prog], c.site(at))
}

// pkgOf returns the import path a selector's package name stands for in
// this file, or "".
func (c *fnCtx) pkgOf(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		if _, local := c.params[id.Name]; local {
			return ""
		}
		if _, local := c.assigns[id.Name]; local {
			return ""
		}
		return c.file.imports[id.Name]
	}
	return ""
}

// call handles one call expression: an execution site, or a call of a wrapper.
func (c *fnCtx) call(call *ast.CallExpr) {
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		switch c.pkgOf(sel.X) + "." + sel.Sel.Name {
		case "os/exec.Command":
			c.exec(call, call.Args)
			return
		case "os/exec.CommandContext":
			if len(call.Args) > 1 {
				c.exec(call, call.Args[1:])
			}
			return
		case "os/exec.LookPath", "os.StartProcess", "syscall.Exec", "golang.org/x/sys/unix.Exec":
			if len(call.Args) > 0 {
				c.unwrap(shape{c.strs(call.Args[0])}, call)
			}
			return
		}
	}
	w, ok := c.wrapperOf(call)
	if !ok {
		return
	}
	if w.slice {
		if w.param < len(call.Args) {
			for _, sh := range c.seqs(call.Args[w.param]) {
				c.unwrap(sh, call)
			}
		}
		return
	}
	if w.param >= len(call.Args) {
		return
	}
	for _, sh := range c.argList(call.Args[w.param:], call.Ellipsis.IsValid()) {
		c.unwrap(sh, call)
	}
}

// wrapperOf finds the wrapper a call calls: a function of this package, a
// package-qualified function of the module, or a method of that name in
// this package or a package of the module this file imports (without
// types, methods are told apart by name and package only).
func (c *fnCtx) wrapperOf(call *ast.CallExpr) (wrapper, bool) {
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		w, ok := c.s.wrappers[funcKey(c.file.pkg, &ast.FuncDecl{Name: fun})]
		return w, ok
	case *ast.SelectorExpr:
		if ip := c.pkgOf(fun.X); ip != "" {
			p := c.s.imported(ip)
			if p == nil {
				return wrapper{}, false
			}
			w, ok := c.s.wrappers[funcKey(p, &ast.FuncDecl{Name: fun.Sel})]
			return w, ok
		}
		method := &ast.FuncDecl{Name: fun.Sel, Recv: &ast.FieldList{}}
		if w, ok := c.s.wrappers[funcKey(c.file.pkg, method)]; ok {
			return w, true
		}
		// A method of this package by that name that passes no argv and
		// takes the call's arguments (test/kube's Machine.Start(ctx,
		// daemons...)) is the one called, not an imported package's
		// wrapper of the same name (test/lab's Node.Start(ctx, argv, env,
		// out)).
		for _, d := range c.file.pkg.methods[fun.Sel.Name] {
			if accepts(d, len(call.Args)) {
				return wrapper{}, false
			}
		}
		for _, ip := range c.file.imports {
			if p := c.s.imported(ip); p != nil {
				// An imported package's wrapper of that name is the one
				// called only if it takes the call's arguments: test/lab's
				// Node.Start(ctx, argv, env, out) is not test/kube's
				// Machine.Start(ctx, daemons...).
				if w, ok := c.s.wrappers[funcKey(p, method)]; ok && slices.ContainsFunc(p.methods[fun.Sel.Name], func(d *ast.FuncDecl) bool { return accepts(d, len(call.Args)) }) {
					return w, true
				}
			}
		}
	}
	return wrapper{}, false
}

// accepts reports whether d can be called with n arguments.
func accepts(d *ast.FuncDecl, n int) bool {
	params, variadic := 0, false
	for _, f := range d.Type.Params.List {
		params += max(1, len(f.Names))
		if _, ok := f.Type.(*ast.Ellipsis); ok {
			variadic = true
		}
	}
	if variadic {
		return n >= params-1
	}
	return n == params
}

// exec reads exec.Command's (program, args...) arguments.
func (c *fnCtx) exec(call *ast.CallExpr, args []ast.Expr) {
	if len(args) == 0 {
		return
	}
	// exec.Command(argv[0], argv[1:]...): the whole argv.
	if ix, ok := args[0].(*ast.IndexExpr); ok && isIntLit(ix.Index, 0) && len(args) == 2 && call.Ellipsis.IsValid() {
		if sl, ok := args[1].(*ast.SliceExpr); ok && isIntLit(sl.Low, 1) && sl.High == nil && sameExpr(ix.X, sl.X) {
			for _, sh := range c.seqs(ix.X) {
				c.unwrap(sh, call)
			}
			return
		}
	}
	for _, sh := range c.argList(args, call.Ellipsis.IsValid()) {
		c.unwrap(sh, call)
	}
}

func isIntLit(e ast.Expr, n int) bool {
	l, ok := e.(*ast.BasicLit)
	return ok && l.Kind == token.INT && l.Value == strconv.Itoa(n)
}

func sameExpr(a, b ast.Expr) bool {
	var x, y strings.Builder
	writeExpr(&x, a)
	writeExpr(&y, b)
	return x.String() == y.String()
}

// argList is the argv of a call's arguments (the last one spread when
// ellipsis).
func (c *fnCtx) argList(args []ast.Expr, ellipsis bool) []shape {
	var head shape
	n := len(args)
	if ellipsis {
		n--
	}
	for _, a := range args[:n] {
		head = append(head, c.strs(a))
	}
	if !ellipsis {
		return []shape{head}
	}
	var out []shape
	for _, tail := range c.seqs(args[n]) {
		out = appendShape(out, append(slices.Clone(head), tail...))
	}
	return out
}

func appendShape(out []shape, sh shape) []shape {
	if len(out) >= maxShapes {
		return out
	}
	return append(out, sh)
}

// unwrap records the program at the head of sh and sees through launchers.
func (c *fnCtx) unwrap(sh shape, at ast.Node) {
	if len(sh) == 0 {
		return
	}
	for _, v := range sh[0] {
		switch v.kind {
		case litValue:
			if v.s == "" {
				continue
			}
			c.record(v.s, at)
			c.launcher(path.Base(v.s), sh, at)
		case paramValue:
			c.markWrapper(wrapper{param: v.param})
		case restValue:
			c.markWrapper(wrapper{param: v.param, slice: !c.variadic(v.param)})
		case unknownValue:
			key := c.file.path + ": " + v.s
			c.s.out.Unresolved[key] = append(c.s.out.Unresolved[key], c.site(at))
		}
	}
}

func (c *fnCtx) variadic(param int) bool {
	if c.decl == nil {
		return false
	}
	list := c.decl.Type.Params.List
	last := list[len(list)-1]
	_, ok := last.Type.(*ast.Ellipsis)
	return ok && param == c.decl.Type.Params.NumFields()-1
}

func (c *fnCtx) markWrapper(w wrapper) {
	if c.decl == nil {
		return
	}
	if old, ok := c.s.wrappers[c.key]; ok && old == w {
		return
	}
	c.s.wrappers[c.key] = w
	c.s.changed = true
}

// lit reports whether position i of sh is the one string want.
func lit(sh shape, i int, want string) bool {
	return i < len(sh) && len(sh[i]) == 1 && sh[i][0].kind == litValue && sh[i][0].s == want
}

// launcher sees through programs that run another program.
func (c *fnCtx) launcher(prog string, sh shape, at ast.Node) {
	switch prog {
	case "nsenter", "unshare", "setsid", "env":
		for i := 1; i < len(sh); i++ {
			if lit(sh, i, "--") {
				c.unwrap(sh[i+1:], at)
				return
			}
		}
		i := 1
		for i < len(sh) && len(sh[i]) == 1 && sh[i][0].kind == litValue &&
			(strings.HasPrefix(sh[i][0].s, "-") || (prog == "env" && strings.Contains(sh[i][0].s, "="))) {
			if sh[i][0].s == "-t" || sh[i][0].s == "--target" {
				i++
			}
			i++
		}
		c.unwrap(sh[min(i, len(sh)):], at)
	case "ip":
		if lit(sh, 1, "netns") && lit(sh, 2, "exec") && len(sh) > 4 {
			c.unwrap(sh[4:], at)
		}
	case "sh", "bash", "dash":
		if !lit(sh, 1, "-c") || len(sh) < 3 {
			return
		}
		for _, v := range sh[2] {
			if v.kind != litValue {
				continue
			}
			for _, p := range shellCommands(v.s) {
				c.record(p, at)
			}
			if strings.Contains(v.s, `"$@"`) && len(sh) > 4 {
				c.unwrap(sh[4:], at)
			}
		}
	}
}

// strs returns the possible values of a string expression.
func (c *fnCtx) strs(e ast.Expr) alts {
	if c.visit[e] {
		return nil
	}
	c.visit[e] = true
	defer delete(c.visit, e)
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			if v, err := strconv.Unquote(e.Value); err == nil {
				return alts{{kind: litValue, s: v}}
			}
		}
	case *ast.ParenExpr:
		return c.strs(e.X)
	case *ast.Ident:
		if i, ok := c.params[e.Name]; ok {
			return alts{{kind: paramValue, param: i}}
		}
		if rhs, ok := c.assigns[e.Name]; ok || len(c.ranges[e.Name]) > 0 || len(c.rangeKeys[e.Name]) > 0 {
			var out alts
			for _, r := range rhs {
				out = append(out, c.strs(r)...)
			}
			for _, x := range c.rangeKeys[e.Name] {
				out = append(out, c.mapKeys(x)...)
			}
			for _, x := range c.ranges[e.Name] {
				for _, sh := range c.seqs(x) {
					for _, a := range sh {
						out = append(out, a...)
					}
				}
			}
			return out
		}
		if v, ok := c.file.pkg.values[e.Name]; ok {
			return c.pkgLevel(c.file).strs(v)
		}
	case *ast.IndexExpr:
		if isIntLit(e.Index, 0) {
			var out alts
			for _, sh := range c.seqs(e.X) {
				if len(sh) > 0 {
					out = append(out, sh[0]...)
				}
			}
			return out
		}
	case *ast.SelectorExpr:
		// pkg.Const of a package of this module.
		if ip := c.pkgOf(e.X); ip != "" {
			if p := c.s.imported(ip); p != nil {
				if v, ok := p.values[e.Sel.Name]; ok && len(p.files) > 0 {
					return c.s.newCtx(p.files[0], nil).strs(v)
				}
			}
		}
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && c.pkgOf(sel.X) == "os/exec" && sel.Sel.Name == "LookPath" && len(e.Args) == 1 {
			return c.strs(e.Args[0])
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			l, r := c.strs(e.X), c.strs(e.Y)
			if len(l) == 1 && len(r) == 1 && l[0].kind == litValue && r[0].kind == litValue {
				return alts{{kind: litValue, s: l[0].s + r[0].s}}
			}
		}
	}
	return alts{{kind: unknownValue, s: c.src(e)}}
}

// mapKeys returns the keys of a map literal, or of the map literals a
// variable is assigned.
func (c *fnCtx) mapKeys(e ast.Expr) alts {
	if c.visit[e] {
		return nil
	}
	c.visit[e] = true
	defer delete(c.visit, e)
	switch e := e.(type) {
	case *ast.CompositeLit:
		if _, ok := e.Type.(*ast.MapType); ok {
			var out alts
			for _, el := range e.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					out = append(out, c.strs(kv.Key)...)
				}
			}
			return out
		}
	case *ast.Ident:
		// Only map literals: scopes are not told apart, so another
		// variable of the same name may be anything.
		var out alts
		for _, r := range c.assigns[e.Name] {
			if m, ok := r.(*ast.CompositeLit); ok {
				out = append(out, c.mapKeys(m)...)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return alts{{kind: unknownValue, s: c.src(e)}}
}

func (c *fnCtx) pkgLevel(f *goFile) *fnCtx {
	return &fnCtx{s: c.s, file: f, params: map[string]int{}, slices: map[string]bool{},
		assigns: map[string][]ast.Expr{}, ranges: map[string][]ast.Expr{}, rangeKeys: map[string][]ast.Expr{},
		visit: c.visit}
}

// seqs returns the possible argvs of a []string expression.
func (c *fnCtx) seqs(e ast.Expr) []shape {
	if c.visit[e] {
		return nil
	}
	c.visit[e] = true
	defer delete(c.visit, e)
	unknown := []shape{{alts{{kind: unknownValue, s: c.src(e)}}}}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return c.seqs(e.X)
	case *ast.CompositeLit:
		var sh shape
		for _, el := range e.Elts {
			sh = append(sh, c.strs(el))
		}
		return []shape{sh}
	case *ast.CallExpr:
		if isIdent(e.Fun, "append") && len(e.Args) > 0 {
			var out []shape
			for _, base := range c.seqs(e.Args[0]) {
				for _, tail := range c.argList(e.Args[1:], e.Ellipsis.IsValid()) {
					out = appendShape(out, append(slices.Clone(base), tail...))
				}
			}
			return out
		}
		if out, ok := c.returns(e, (*fnCtx).seqs); ok {
			return out
		}
	case *ast.Ident:
		if i, ok := c.params[e.Name]; ok {
			if c.slices[e.Name] {
				return []shape{{alts{{kind: restValue, param: i}}}}
			}
			return unknown
		}
		if rhs, ok := c.assigns[e.Name]; ok || len(c.ranges[e.Name]) > 0 {
			var out []shape
			for _, r := range rhs {
				for _, sh := range c.seqs(r) {
					out = appendShape(out, sh)
				}
			}
			for _, x := range c.ranges[e.Name] {
				for _, sh := range c.elemSeqs(x) {
					out = appendShape(out, sh)
				}
			}
			return out
		}
		if v, ok := c.file.pkg.values[e.Name]; ok {
			return c.pkgLevel(c.file).seqs(v)
		}
	}
	return unknown
}

// elemSeqs returns the possible argvs among the elements of a [][]string
// expression.
func (c *fnCtx) elemSeqs(e ast.Expr) []shape {
	if c.visit[e] {
		return nil
	}
	c.visit[e] = true
	defer delete(c.visit, e)
	switch e := e.(type) {
	case *ast.CompositeLit:
		var out []shape
		for _, el := range e.Elts {
			for _, sh := range c.seqs(el) {
				out = appendShape(out, sh)
			}
		}
		return out
	case *ast.CallExpr:
		if isIdent(e.Fun, "append") && len(e.Args) > 0 {
			out := c.elemSeqs(e.Args[0])
			rest := e.Args[1:]
			if e.Ellipsis.IsValid() && len(rest) > 0 {
				for _, sh := range c.elemSeqs(rest[len(rest)-1]) {
					out = appendShape(out, sh)
				}
				rest = rest[:len(rest)-1]
			}
			for _, a := range rest {
				for _, sh := range c.seqs(a) {
					out = appendShape(out, sh)
				}
			}
			return out
		}
		if out, ok := c.returns(e, (*fnCtx).elemSeqs); ok {
			return out
		}
	case *ast.Ident:
		if rhs, ok := c.assigns[e.Name]; ok {
			var out []shape
			for _, r := range rhs {
				for _, sh := range c.elemSeqs(r) {
					out = appendShape(out, sh)
				}
			}
			return out
		}
	}
	return []shape{{alts{{kind: unknownValue, s: c.src(e)}}}}
}

// returns reads the first result of every return statement of the
// function or method of this package that call calls.
func (c *fnCtx) returns(call *ast.CallExpr, read func(*fnCtx, ast.Expr) []shape) ([]shape, bool) {
	var decls []*ast.FuncDecl
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		decls = c.file.pkg.funcs[fun.Name]
	case *ast.SelectorExpr:
		if c.pkgOf(fun.X) != "" {
			return nil, false
		}
		decls = c.file.pkg.methods[fun.Sel.Name]
	}
	if len(decls) == 0 {
		return nil, false
	}
	var out []shape
	for _, d := range decls {
		f := c.fileOf(d)
		callee := c.s.newCtx(f, d)
		callee.visit = c.visit
		ast.Inspect(d.Body, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncLit); ok {
				return false
			}
			if r, ok := n.(*ast.ReturnStmt); ok && len(r.Results) > 0 {
				for _, sh := range read(callee, r.Results[0]) {
					out = appendShape(out, sh)
				}
			}
			return true
		})
	}
	return out, true
}

// fileOf returns the file of this package that declares d, or nil.
func (c *fnCtx) fileOf(d *ast.FuncDecl) *goFile {
	for _, f := range c.file.pkg.files {
		if f.ast.Pos() <= d.Pos() && d.End() <= f.ast.End() {
			return f
		}
	}
	return nil
}

// writeExpr writes a short source form of e, enough to name it in a report.
func writeExpr(b *strings.Builder, e ast.Expr) {
	switch e := e.(type) {
	case *ast.Ident:
		b.WriteString(e.Name)
	case *ast.SelectorExpr:
		writeExpr(b, e.X)
		b.WriteString("." + e.Sel.Name)
	case *ast.IndexExpr:
		writeExpr(b, e.X)
		b.WriteString("[")
		writeExpr(b, e.Index)
		b.WriteString("]")
	case *ast.BasicLit:
		b.WriteString(e.Value)
	case *ast.CallExpr:
		writeExpr(b, e.Fun)
		b.WriteString("(…)")
	case *ast.StarExpr:
		b.WriteString("*")
		writeExpr(b, e.X)
	case *ast.ParenExpr:
		b.WriteString("(")
		writeExpr(b, e.X)
		b.WriteString(")")
	case *ast.SliceExpr:
		writeExpr(b, e.X)
		b.WriteString("[…]")
	default:
		fmt.Fprintf(b, "%T", e)
	}
}

// shellKeywords and shellBuiltins start commands that run no program.
var (
	shellKeywords = map[string]bool{"if": true, "then": true, "else": true, "elif": true, "fi": true,
		"while": true, "until": true, "do": true, "done": true, "for": true, "case": true, "esac": true,
		"in": true, "{": true, "}": true, "!": true, "(": true, ")": true, "time": true}
	shellBuiltins = map[string]bool{":": true, ".": true, "source": true, "set": true, "exit": true,
		"echo": true, "printf": true, "true": true, "false": true, "cd": true, "export": true,
		"read": true, "wait": true, "kill": true, "test": true, "[": true, "[[": true, "return": true,
		"shift": true, "local": true, "unset": true, "trap": true, "eval": true, "ulimit": true, "umask": true}
)

// shellCommands returns the programs a shell script runs: the first word
// of every simple command that is not a keyword, builtin, assignment or
// expansion; after exec, the word that follows. Good enough for the short
// scripts the tests pass to sh -c; it does not follow command substitution.
func shellCommands(script string) []string {
	var out []string
	for _, cmd := range splitCommands(script) {
		words := shellWords(cmd)
		for len(words) > 0 {
			w := words[0]
			switch {
			case w == "for" && len(words) > 1:
				// for NAME in WORDS...: NAME is no command.
				words = words[2:]
				continue
			case shellKeywords[w], strings.Contains(w, "=") && !strings.HasPrefix(w, "="),
				w == "exec", strings.HasPrefix(w, ">"), strings.HasPrefix(w, "<"):
				words = words[1:]
				continue
			}
			if len(w) > 1 && strings.ContainsAny(w[:1], "0123456789") && strings.ContainsAny(w, "<>") {
				words = words[1:]
				continue
			}
			if !shellBuiltins[w] && !strings.ContainsAny(w, "$`") {
				out = append(out, w)
			}
			break
		}
	}
	return out
}

// splitCommands splits a script at newlines, ;, &, | and && / || outside quotes.
func splitCommands(script string) []string {
	var out []string
	var cur strings.Builder
	var quote byte
	for i := 0; i < len(script); i++ {
		ch := script[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
			cur.WriteByte(ch)
		case ch == '\'' || ch == '"':
			quote = ch
			cur.WriteByte(ch)
		case ch == '\n' || ch == ';' || ch == '&' || ch == '|':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(ch)
		}
	}
	return append(out, cur.String())
}

// shellWords splits one command into words, removing quotes.
func shellWords(cmd string) []string {
	var out []string
	var cur strings.Builder
	var quote byte
	in := false
	for i := 0; i < len(cmd); i++ {
		ch := cmd[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			} else {
				cur.WriteByte(ch)
			}
		case ch == '\'' || ch == '"':
			quote, in = ch, true
		case ch == ' ' || ch == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
