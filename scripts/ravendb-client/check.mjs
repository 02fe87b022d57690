// check.mjs: RavenDB's official Node.js client against a running shardnode
// (see ../ravendb-client-check.sh). Each step prints "ok <step>"; the first
// failure prints "FAIL <step>: <error>" and exits 1.
import { DocumentStore } from "ravendb";

const [url, db] = process.argv.slice(2);
const store = new DocumentStore(url, db);
store.initialize();

class User {
  constructor(name, age) {
    this.name = name;
    this.age = age;
  }
}

let step = "";
function check(cond, what) {
  if (!cond) throw new Error(what);
}

try {
  step = "store with ids";
  let s = store.openSession();
  await s.store(new User("ann", 31), "users/ann");
  await s.store(new User("bob", 45), "users/bob");
  await s.saveChanges();
  console.log("ok", step);

  step = "load and update";
  s = store.openSession();
  const ann = await s.load("users/ann");
  check(ann && ann.name === "ann" && ann.age === 31, `loaded ${JSON.stringify(ann)}`);
  ann.age = 32;
  await s.saveChanges();
  check((await store.openSession().load("users/ann")).age === 32, "update not stored");
  console.log("ok", step);

  step = "load several, one missing";
  const many = await store.openSession().load(["users/ann", "users/bob", "users/nobody"]);
  check(many["users/ann"].age === 32 && many["users/bob"].age === 45 && many["users/nobody"] === null, JSON.stringify(many));
  console.log("ok", step);

  step = "optimistic concurrency";
  s = store.openSession();
  s.advanced.useOptimisticConcurrency = true;
  const bob = await s.load("users/bob");
  const other = store.openSession();
  const bob2 = await other.load("users/bob");
  bob2.age = 47;
  await other.saveChanges();
  bob.age = 48;
  let refused = false;
  try {
    await s.saveChanges();
  } catch (e) {
    refused = e.name === "ConcurrencyException";
    if (!refused) throw e;
  }
  check(refused, "a stale change vector was accepted");
  s = store.openSession();
  s.advanced.useOptimisticConcurrency = true;
  await s.store(new User("new", 1), "users/new");
  await s.saveChanges();
  console.log("ok", step);

  step = "store without ids (HiLo)";
  const ids = new Set();
  for (let round = 0; round < 3; round++) {
    s = store.openSession();
    const users = [];
    for (let i = 0; i < 50; i++) {
      const u = new User(`gen${round}-${i}`, i % 20);
      await s.store(u);
      users.push(u);
    }
    await s.saveChanges();
    for (const u of users) ids.add(s.advanced.getDocumentId(u));
  }
  check(ids.size === 150, `${ids.size} distinct generated ids of 150`);
  for (const id of ids) check(/^users\/\d+-[A-Z]{1,4}$/.test(id), `generated id ${id}`);
  const loaded = await store.openSession().load([...ids]);
  check(Object.values(loaded).every((u) => u !== null), "a generated id was not stored");
  console.log("ok", step, [...ids].slice(0, 3).join(" "), "...");

  step = "query";
  const q = await store.openSession().query({ collection: "Users" }).whereGreaterThan("age", 30).orderByDescending("age").all();
  check(q.length === 2 && q[0].name === "bob" && q[1].name === "ann", JSON.stringify(q.map((u) => u.name)));
  console.log("ok", step);

  step = "paging, count, first";
  s = store.openSession();
  const page = await s.query({ collection: "Users" }).whereStartsWith("name", "GEN1-").orderBy("name").skip(10).take(5).all();
  check(page.length === 5 && page[0].name === "gen1-18", JSON.stringify(page.map((u) => u.name)));
  check((await s.query({ collection: "Users" }).whereStartsWith("name", "gen").count()) === 150, "count of generated users");
  check((await s.query({ collection: "Users" }).whereEquals("name", "ann").first()).age === 32, "first");
  console.log("ok", step);

  step = "in, between, exists";
  s = store.openSession();
  const inList = await s.query({ collection: "Users" }).whereIn("name", ["ann", "bob", "nobody"]).all();
  check(inList.length === 2, `whereIn: ${inList.length}`);
  const between = await s.query({ collection: "Users" }).whereBetween("age", 31, 47).all();
  check(between.length === 2, `whereBetween: ${between.length}`);
  const withAge = await s.query({ collection: "Users" }).whereExists("age").count();
  check(withAge === 153, `whereExists: ${withAge}`);
  console.log("ok", step);

  step = "lazy operations (multi_get)";
  s = store.openSession();
  const lazyAnn = s.advanced.lazily.load("users/ann");
  const lazyNobody = s.advanced.lazily.load("users/nobody");
  const lazyCount = s.query({ collection: "Users" }).whereGreaterThan("age", 30).countLazily();
  await s.advanced.eagerly.executeAllPendingLazyOperations();
  check((await lazyAnn.getValue()).age === 32 && (await lazyNobody.getValue()) === null && (await lazyCount.getValue()) === 2, "lazy results");
  check(s.advanced.numberOfRequests === 1, `${s.advanced.numberOfRequests} requests for three lazy operations`);
  console.log("ok", step);

  step = "includes";
  s = store.openSession();
  await s.store({ name: "Acme", "@metadata": { "@collection": "Companies" } }, "companies/1");
  await s.store({ company: "companies/1", total: 10, "@metadata": { "@collection": "Orders" } }, "orders/1");
  await s.saveChanges();
  s = store.openSession();
  const order = await s.include("company").load("orders/1");
  const company = await s.load(order.company);
  check(company && company.name === "Acme", `included company ${JSON.stringify(company)}`);
  check(s.advanced.numberOfRequests === 1, `${s.advanced.numberOfRequests} requests for a load and its include`);
  s = store.openSession();
  const orders = await s.query({ collection: "Orders" }).include("company").all();
  check(orders.length === 1 && (await s.load(orders[0].company)).name === "Acme", "a query's include");
  check(s.advanced.numberOfRequests === 1, `${s.advanced.numberOfRequests} requests for a query and its include`);
  console.log("ok", step);

  step = "delete";
  s = store.openSession();
  s.delete("users/bob");
  await s.saveChanges();
  check((await store.openSession().load("users/bob")) === null, "users/bob still there");
  console.log("ok", step);
} catch (e) {
  console.log(`FAIL ${step}: ${e.name}: ${String(e.message).slice(0, 800)}`);
  store.dispose();
  process.exit(1);
}
store.dispose();
